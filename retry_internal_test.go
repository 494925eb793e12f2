package throttle

import (
	"net/http"
	"net/url"
	"testing"
	"time"
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

// WeChat's GET /cgi-bin/token rotates its token, so it is never resent as
// an idempotent GET, however its URL is written: as an Opaque URL (Path
// empty, the path sent being Opaque's) it used to be, and a retry of an
// ambiguous failure fetched twice.
func TestRotatingExchangeAsOpaqueURLIsNotIdempotent(t *testing.T) {
	for _, u := range []*url.URL{
		{Scheme: "https", Host: "api.weixin.qq.com", Path: "/cgi-bin/token", RawQuery: "grant_type=client_credential"},
		{Scheme: "https", Host: "api.weixin.qq.com", Opaque: "//api.weixin.qq.com/cgi-bin/token", RawQuery: "grant_type=client_credential"},
		{Scheme: "https", Host: "api.weixin.qq.com", Opaque: "/cgi-bin//token"},
	} {
		if idempotent(&http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}}) {
			t.Errorf("GET %s (Path %q, Opaque %q): idempotent", u, u.Path, u.Opaque)
		}
	}
	plain := &url.URL{Scheme: "https", Host: "api.weixin.qq.com", Opaque: "//api.weixin.qq.com/cgi-bin/user/info"}
	if !idempotent(&http.Request{Method: http.MethodGet, URL: plain, Header: http.Header{}}) {
		t.Errorf("GET %s: not idempotent", plain)
	}
}

// Every retry's wait is spread, the first one too, within [min, max]: an
// event that fails many callers at once (a connection reset) must not bring
// them all back at the same instant.
func TestBackoffSpreadsTheFirstRetry(t *testing.T) {
	p := RetryPolicy{}.withDefaults()
	for attempt := 1; attempt <= 4; attempt++ {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := backoff(p, attempt)
			if d < p.MinBackoff || d > p.MaxBackoff {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", attempt, d, p.MinBackoff, p.MaxBackoff)
			}
			seen[d] = true
		}
		if len(seen) < 100 {
			t.Fatalf("attempt %d: %d distinct waits in 200 draws, want them spread", attempt, len(seen))
		}
	}
}
