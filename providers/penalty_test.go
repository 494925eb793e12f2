package providers

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"120", 2 * time.Minute, true},
		{"0", 0, true},
		{"Wed, 01 Jan 2025 10:00:30 GMT", 30 * time.Second, true},
		{"Wed, 01 Jan 2025 09:00:00 GMT", 0, true},
		{"Fri, 01 Jan 2100 00:00:00 GMT", 0, false},
		{"soon", 0, false},
		{"-1", 0, false},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.v != "" {
			h.Set("Retry-After", tt.v)
		}
		got, ok := ParseRetryAfter(h, now)
		if ok != tt.ok || got != tt.want {
			t.Errorf("ParseRetryAfter(%q) = %v, %v, want %v, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}

// DefaultMaxPenalty is written out for go doc; it must stay the longest
// wait a header or message may state, plus the grace.
func TestDefaultMaxPenaltyCoversTheLongestWait(t *testing.T) {
	if DefaultMaxPenalty != penaltytime.MaxWait+time.Minute {
		t.Fatalf("DefaultMaxPenalty %v, want %v", DefaultMaxPenalty, penaltytime.MaxWait+time.Minute)
	}
}
