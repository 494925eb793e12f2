package throttle

import (
	"log/slog"
	"net/http"
	"sync"

	"github.com/quotaware/throttle/internal/apihosts"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxUnmatchedHosts bounds the hosts remembered for logging, so a caller
// that reaches many subdomains cannot grow the set without end.
const maxUnmatchedHosts = 64

// unmatched counts and logs requests to a provider's API host that no profile
// matched: the one way protection is lost without an error. Logging works
// with telemetry off; the counter needs it on.
type unmatched struct {
	counter metric.Int64Counter                 // nil without telemetry
	sets    map[string]metric.MeasurementOption // by provider

	mu     sync.Mutex
	logged map[string]struct{} // hosts logged, at most maxUnmatchedHosts
}

func newUnmatched(m metric.Meter, report func(error)) *unmatched {
	u := &unmatched{logged: make(map[string]struct{})}
	if m == nil {
		return u
	}
	var err error
	u.counter, err = m.Int64Counter("throttle.requests.unmatched", metric.WithUnit("{request}"),
		metric.WithDescription("Requests to a known provider's API host that no profile matched, sent without limits."))
	report(err)
	u.sets = make(map[string]metric.MeasurementOption)
	for _, p := range apihosts.Providers() {
		u.sets[p] = metric.WithAttributeSet(attribute.NewSet(attribute.String("provider", p)))
	}
	return u
}

// record notes a request that matched no profile, when its host is a
// provider's. The host is logged (never the path or query, which may carry
// credentials), once per host.
func (u *unmatched) record(req *http.Request, log *slog.Logger) {
	host := req.Host
	if req.URL != nil && req.URL.Host != "" {
		host = req.URL.Host
	}
	prov := apihosts.Provider(host)
	if prov == "" && req.Host != "" && req.Host != host {
		// Sent to a gateway by URL, naming the provider in Host.
		host = req.Host
		prov = apihosts.Provider(host)
	}
	if prov == "" {
		return
	}
	if u.counter != nil {
		u.counter.Add(req.Context(), 1, u.sets[prov])
	}
	u.mu.Lock()
	_, seen := u.logged[host]
	first := !seen && len(u.logged) < maxUnmatchedHosts
	if first {
		u.logged[host] = struct{}{}
	}
	u.mu.Unlock()
	if first {
		log.Warn("throttle: a request to a provider's API host matched no profile and was sent without limits; "+
			"check the profile's hosts (written without scheme or path, e.g. api.dingtalk.com)",
			"provider", prov, "host", host)
	}
}
