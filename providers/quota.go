package providers

import (
	"context"
	"net/http"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
)

// QuotaCheck lets the Transport reconcile a profile's calendar quotas with
// the provider's own account of them (WeChat's /cgi-bin/openapi/quota/get):
// the provider knows the limit it really grants and the calls every client
// of the app made, including those of other systems sharing the app, which
// no counter of ours saw.
//
// For every request, Target names the quota the request counts against
// and the credential it carries. In the background (never on the request
// path) the Transport reads each named quota once soon after its first
// use and then every Every, one replica of the fleet at a time: it sends
// Query through itself, charged to the app (so the quota endpoint's own
// rules apply), and Read's answer sets the rule's limit for every replica
// (a Learned with App set) and the current window's count (never lowering
// what the fleet booked).
type QuotaCheck struct {
	// Every is how often one app's quota is read again; at least a second.
	Every time.Duration
	// Target returns the quota that a request routed to route counts
	// against and can be read, or false. It runs for every request the
	// profile routes and must be cheap.
	Target func(req *http.Request, route *Route) (QuotaTarget, bool)
	// Query builds the request that reads t's quota.
	Query func(ctx context.Context, t QuotaTarget) (*http.Request, error)
	// Read reads Query's answer. Its error must not quote the request.
	Read func(resp *http.Response) (QuotaReading, error)
}

// QuotaTarget is one app's quota of one API, as a request named it.
type QuotaTarget struct {
	// App is the app (WeChat: the AppID); API the Route.API.
	App, API string
	// Rule is the calendar rule that keeps the quota.
	Rule rule.Rule
	// Origin is the scheme and host the request went to
	// ("https://api.weixin.qq.com"), and Host the Host header it carried
	// when that named another host (a gateway reached by URL that
	// forwards by Host), "" otherwise: the reading goes the same way.
	Origin, Host string
	// Token is the credential the request carried: kept in memory only,
	// never logged (String leaves it out).
	Token string
}

// String describes the target without its token.
func (t QuotaTarget) String() string { return t.App + " " + t.API }

// QuotaReading is what the provider says of a quota's current window.
type QuotaReading struct {
	// Limit is the window's limit the provider grants the app.
	Limit int
	// Used is the calls it counted in the window, by every client.
	Used int
}
