package throttle_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers"
)

// Requests whose route the profile's catalog did not know are counted by
// provider, so an operator sees the catalog fall behind.
func TestUncataloguedRequestsCounted(t *testing.T) {
	o := newObservability(t)
	srv := serve(t, &recorder{answer: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{}`) }})
	p := testProfile("test", mustRule(t, 100, time.Second))
	route := p.Route
	p.Route = func(r *http.Request) (providers.Route, error) {
		rt, err := route(r)
		rt.Uncatalogued = r.URL.Path == "/new"
		return rt, err
	}
	c := &http.Client{Transport: throttle.MustNew(append(o.opts, throttle.WithProfiles(p))...)}
	for _, path := range []string{"/known", "/new", "/new"} {
		if resp, err := get(context.Background(), c, srv.URL+path); err != nil {
			t.Fatal(err)
		} else {
			resp.Body.Close()
		}
	}
	m, ok := o.metrics(t)["throttle.requests.uncatalogued"]
	if !ok || m.Unit != "{request}" || m.Description == "" {
		t.Fatalf("throttle.requests.uncatalogued: %+v", m)
	}
	if got := counts(t, m, "provider"); got["test"] != 2 || len(got) != 1 {
		t.Fatalf("throttle.requests.uncatalogued by provider = %v, want test: 2", got)
	}
}
