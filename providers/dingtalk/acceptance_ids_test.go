package dingtalk_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// Four replicas on one Redis read users of eight ID shapes (pinyin and
// mixed-case user IDs, a letters-only union ID, a UUID, base64-like, an
// email, Chinese) through one API of the new generation, five times its
// 20/s in all with at least five callers per ID in flight. Folding paths by
// how IDs look made three of these IDs three APIs and let 57 calls/s
// through; routed by the catalog they are one API: the emulator, which
// names APIs by its own copy of the templates, rejects nothing, and the API
// gets at least 90% of its published rate.
func TestAcceptanceIDsOfEveryShapeAreOneAPI(t *testing.T) {
	// A share of the rate under the measured allowance, which other
	// packages' load widens (76-80% seen beside them): run alone.
	loadtest.Alone(t)
	const api = "GET /v1.0/contact/users/{unionId}"
	f := newFleet(t, 4, dingtalktest.Options{}, dingtalk.Config{Apps: []dingtalk.App{{}}})
	var inFlight loadtest.Concurrency
	ids := loadtest.IDs
	call := func(ctx context.Context, i, id int) loadtest.Result {
		defer inFlight.Enter(ids[id])()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.emu.URL+"/v1.0/contact/users/"+url.PathEscape(ids[id]), nil)
		req.Header.Set("x-acs-dingtalk-access-token", f.token)
		return loadtest.Send(f.clients[i], req, "errcode")
	}
	rate := float64(demand) * published / float64(len(ids))
	run := loadtest.Fire(4, 10*time.Second, slices.Repeat([]float64{rate}, len(ids)), call)
	t.Logf("4 replicas, 10s, %d IDs, demand %.0f calls/s in all (%d× the limit), latency 0-%v", len(ids), rate*float64(len(ids)), demand, latency)
	answers := loadtest.Answers{ByCode: map[int]int{}}
	var arrivals []loadtest.Arrival
	for _, r := range f.emu.Requests() {
		answers.Total++
		if r.Code != "" {
			answers.ByCode[-r.Status]++
		}
		if r.API == api && r.Code == "" && r.Status == http.StatusOK {
			arrivals = append(arrivals, loadtest.Arrival{At: r.At, Emulated: r.At})
		}
	}
	answers.OK = answers.Total
	for _, n := range answers.ByCode {
		answers.OK -= n
	}
	run.ExpectClean(t, answers, func(code int) bool { return code == -http.StatusForbidden || code == -http.StatusTooManyRequests })
	run.ExpectShare(t, api, arrivals, published, time.Second, int(published))
	inFlight.ExpectAtLeast(t, 5)
}
