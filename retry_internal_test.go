package throttle

import (
	"net/http"
	"testing"
)

// An idempotency key makes a POST safe to repeat in whatever case the
// client wrote its name: one set through the header map in lower case
// used to be missed.
func TestIdempotencyKeyAnyCase(t *testing.T) {
	for _, h := range []http.Header{
		{"Idempotency-Key": {"k1"}},
		{"idempotency-key": {"k1"}},
		{"x-idempotency-key": {"k1"}},
	} {
		if !idempotent(&http.Request{Method: http.MethodPost, Header: h}) {
			t.Errorf("POST with %v: not idempotent", h)
		}
	}
	if idempotent(&http.Request{Method: http.MethodPost, Header: http.Header{"Content-Type": {"application/json"}}}) {
		t.Error("POST without a key: idempotent")
	}
}
