package wecom_test

// Acceptance test of many companies behind one Transport per replica: two
// companies of the service's own (gettoken) and a third-party suite that
// two more companies authorised (get_suite_token, then get_corp_token per
// company), called by an SDK-like client that only sends the tokens. Each
// replica learns the tokens' companies from the exchanges or from Redis.
// Time is scaled as in acceptance_test.go.

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/providers/wecom"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

func TestAcceptanceManyCompanies(t *testing.T) {
	const path = "/cgi-bin/user/get"
	type company struct {
		corp      string
		perMinute int  // published per API, per real minute
		suite     bool // authorised the third-party suite
	}
	companies := []company{
		{"wwOwnA", 600, false},
		{"wwOwnB", 300, false}, // listed with its own limit
		{"wwCustomer1", 300, true},
		{"wwCustomer2", 300, true},
	}
	// The preset's windows run as fast as the emulator's, with its limits.
	// (WeCom's documented limits: 20,000 a minute and 600,000 an hour per
	// IP, 150,000 an hour per company.)
	shared := wecom.Config{
		IPPerMinute: 20000 / accTimeScale, IPPerHour: 600000 / accTimeScale, TimeScale: accTimeScale,
		Unknown: wecom.App{CorpPerMinute: 300 / accTimeScale, CorpPerHour: 150000 / accTimeScale},
	}
	emuOpts := wecomtest.Options{
		TimeScale: accTimeScale, LatencyMax: accLatency,
		Limits: wecomtest.Limits{
			CorpPerHour: 150000 / accTimeScale,
			IPPerMinute: 20000 / accTimeScale, IPPerHour: 600000 / accTimeScale,
		},
		CorpLimits: map[string]wecomtest.Limits{},
	}
	for _, c := range companies {
		emuOpts.CorpLimits[c.corp] = wecomtest.Limits{CorpPerMinute: c.perMinute / accTimeScale, CorpPerHour: 150000 / accTimeScale}
	}
	emu := wecomtest.NewServer(emuOpts)
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	shared.Hosts = []string{u.Hostname()}
	shared.Apps = []wecom.App{
		{CorpID: "wwOwnA", CorpPerMinute: 600 / accTimeScale, CorpPerHour: shared.Unknown.CorpPerHour},
		{CorpID: "wwOwnB", CorpPerMinute: 300 / accTimeScale, CorpPerHour: shared.Unknown.CorpPerHour},
	}
	set := wecom.MustNew(shared)
	clients, books := loadtest.AppReplicas(t, accReplicas, throttle.WithProfiles(set.Profile()))

	fetch := func(c *http.Client, method, target, body, member string) string {
		t.Helper()
		req, _ := http.NewRequest(method, emu.URL+target, strings.NewReader(body))
		return loadtest.FetchToken(t, c, req, member)
	}
	suiteToken := fetch(clients[0], http.MethodPost, "/cgi-bin/service/get_suite_token",
		`{"suite_id":"wwSuite","suite_secret":"ss","suite_ticket":"tk"}`, "suite_access_token")
	tokens := make([]string, len(companies))
	for k, c := range companies {
		cl := clients[k%accReplicas]
		if c.suite {
			tokens[k] = fetch(cl, http.MethodPost, "/cgi-bin/service/get_corp_token?suite_access_token="+suiteToken,
				`{"auth_corpid":"`+c.corp+`","permanent_code":"pc"}`, "access_token")
		} else {
			tokens[k] = fetch(cl, http.MethodGet, "/cgi-bin/gettoken?corpid="+c.corp+"&corpsecret=sec", "", "access_token")
		}
	}
	call := func(ctx context.Context, i, k int) loadtest.Result {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, emu.URL+path+"?access_token="+tokens[k]+"&userid=zhangsan", nil)
		return loadtest.Send(clients[i], req, "errcode")
	}
	rates := make([]float64, len(companies))
	for k, c := range companies {
		rates[k] = accDemand * float64(c.perMinute) / 60
	}
	run := loadtest.Fire(accReplicas, accRun, rates, call)

	run.ExpectClean(t, loadtest.Answers(emu.Counters()), isQuotaCode)
	loadtest.ExpectAllKnown(t, books)
	recs := emu.Requests()
	for _, c := range companies {
		var arrivals []loadtest.Arrival
		for _, r := range recs {
			if r.App == c.corp && r.Path == path && r.Code == 0 && r.Status == http.StatusOK {
				arrivals = append(arrivals, loadtest.Arrival{At: r.At, Emulated: r.Emulated})
			}
		}
		run.ExpectShare(t, c.corp, arrivals, float64(c.perMinute)/60, time.Minute, c.perMinute/accTimeScale)
	}
}
