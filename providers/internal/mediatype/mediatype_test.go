package mediatype

import "testing"

func TestPeekable(t *testing.T) {
	tests := []struct {
		ct         string
		peek, json bool
	}{
		{"", true, false},
		{"application/json", true, true},
		{"application/json;charset=UTF-8", true, true},
		{" text/json ", true, true},
		{"application/vnd.api+json", true, true},
		{"text/html", true, false},
		{"text/plain; charset=gbk", true, false},
		{"application/xml", false, false},
		{"application/jsonl", false, false},
		{"+json", false, false},
		{"multipart/form-data; boundary=x", false, false},
	}
	for _, tt := range tests {
		if got := Peekable(tt.ct); got != tt.peek {
			t.Errorf("Peekable(%q) = %v, want %v", tt.ct, got, tt.peek)
		}
		if got := IsJSON(tt.ct); got != tt.json {
			t.Errorf("IsJSON(%q) = %v, want %v", tt.ct, got, tt.json)
		}
	}
	if !IsHTML("TEXT/HTML; charset=utf-8") || IsHTML("text/plain") {
		t.Error("IsHTML misreads its input")
	}
}
