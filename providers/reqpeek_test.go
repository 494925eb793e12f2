package providers

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

func TestPeekRequestBody(t *testing.T) {
	small := `{"receive_id":"oc_abc","msg_type":"text","content":"{\"text\":\"hi\"}"}`
	large := `{"receive_id":"oc_abc","content":"` + strings.Repeat("x", 8<<10) + `"}`
	tests := []struct {
		name         string
		body         string
		unknownLen   bool // ContentLength -1: a stream
		limit        int
		wantPrefix   string
		wantComplete bool
	}{
		{"small", small, false, 4 << 10, small, true},
		{"small stream", small, true, 4 << 10, small, true},
		{"exactly the limit", small, false, len(small), small, true},
		{"exactly the limit, stream", small, true, len(small), small, true},
		{"one byte over, stream", small, true, len(small) - 1, small[:len(small)-1], false},
		{"large: a prefix", large, false, 4 << 10, large[:4<<10], false},
		{"large stream: a prefix", large, true, 4 << 10, large[:4<<10], false},
		// limit+1 overflowed into a negative capacity: a panic.
		{"no limit, stream", small, true, math.MaxInt, small, true},
		{"no limit", small, false, math.MaxInt, small, true},
		{"empty", "", false, 4 << 10, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, "https://open.feishu.cn/open-apis/im/v1/messages", strings.NewReader(tc.body))
			if tc.unknownLen {
				req.ContentLength = -1
				req.Body = io.NopCloser(iotest.HalfReader(strings.NewReader(tc.body)))
			}
			cl, getBody := req.ContentLength, req.GetBody
			prefix, complete := PeekRequestBody(req, tc.limit)
			if string(prefix) != tc.wantPrefix || complete != tc.wantComplete {
				t.Errorf("prefix %d bytes %v, want %d bytes %v", len(prefix), complete, len(tc.wantPrefix), tc.wantComplete)
			}
			if req.ContentLength != cl {
				t.Errorf("ContentLength %d, was %d", req.ContentLength, cl)
			}
			if got, err := io.ReadAll(req.Body); err != nil || string(got) != tc.body {
				t.Errorf("the body reads %d bytes, %v; want the %d sent", len(got), err, len(tc.body))
			}
			if getBody != nil {
				rewound, _ := req.GetBody()
				if got, _ := io.ReadAll(rewound); string(got) != tc.body {
					t.Errorf("GetBody reads %d bytes, want %d", len(got), len(tc.body))
				}
			}
		})
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// An unreadable body gives back what it gave, then its error at the same
// offset, and reports an incomplete prefix; closing closes the original.
func TestPeekRequestBodyError(t *testing.T) {
	boom := errors.New("boom")
	orig := &closeRecorder{Reader: io.MultiReader(strings.NewReader(`{"receive_id":"o`), iotest.ErrReader(boom))}
	req, _ := http.NewRequest(http.MethodPost, "https://x/", nil)
	req.Body, req.ContentLength = orig, -1
	prefix, complete := PeekRequestBody(req, 1024)
	if complete || string(prefix) != `{"receive_id":"o` {
		t.Fatalf("prefix %q complete %v", prefix, complete)
	}
	got, err := io.ReadAll(req.Body)
	if string(got) != `{"receive_id":"o` || !errors.Is(err, boom) {
		t.Fatalf("reads %q, %v", got, err)
	}
	req.Body.Close()
	if !orig.closed {
		t.Fatal("the original body was not closed")
	}
	for _, body := range []io.ReadCloser{nil, http.NoBody} {
		r := &http.Request{Body: body}
		if p, ok := PeekRequestBody(r, 10); p != nil || !ok || r.Body != body {
			t.Errorf("no body: %q %v", p, ok)
		}
	}
}

func FuzzPeekRequestBody(f *testing.F) {
	f.Add([]byte(`{"receive_id":"oc_1"}`), 8, true)
	f.Add([]byte{}, 1, false)
	f.Fuzz(func(t *testing.T, body []byte, limit int, knownLen bool) {
		limit = limit%(1<<12) + 1
		if limit <= 0 {
			limit += 1 << 12
		}
		req, _ := http.NewRequest(http.MethodPost, "https://x/", bytes.NewReader(body))
		if !knownLen {
			req.ContentLength = -1
		}
		prefix, complete := PeekRequestBody(req, limit)
		if len(prefix) > limit || !bytes.HasPrefix(body, prefix) || complete && !bytes.Equal(prefix, body) {
			t.Fatalf("prefix %q complete %v of %q (limit %d)", prefix, complete, body, limit)
		}
		if got, err := io.ReadAll(req.Body); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("body reads %q, %v; want %q", got, err, body)
		}
	})
}
