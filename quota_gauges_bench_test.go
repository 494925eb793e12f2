package throttle

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// What learning calendar rules adds to a request: the DingTalk preset's
// Route for a metered API (which carries the monthly rule), bare and as the
// Transport wraps it.
//
//	go test -run '^$' -bench RouteObserve -benchmem .
func BenchmarkRouteObserve(b *testing.B) {
	p := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingbench"}}}).Profile()
	req, _ := http.NewRequest(http.MethodGet, "https://api.dingtalk.com/v1.0/contact/users/manager4220", nil)
	q := &quotaWatch{log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		name  string
		route func(*http.Request) (providers.Route, error)
	}{
		{"bare", p.Route},
		{"observed", q.observe(p.Name, p.Route)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := tc.route(req)
				if err != nil || len(r.Rules) != 3 {
					b.Fatalf("route: %v, %d rules", err, len(r.Rules))
				}
			}
		})
	}
}
