package wechat_test

// Acceptance test of many accounts behind one Transport per replica: three
// AppIDs, one with raised quotas, called by an SDK-like client that fetches
// tokens from /cgi-bin/token and /cgi-bin/stable_token and then only sends
// them. Each replica learns the tokens' accounts from the exchanges or,
// for tokens another replica fetched, from Redis. Time is scaled as in
// acceptance_test.go.

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// account is one AppID the service holds; perMinute its published limit
// on the API under load, per real minute.
type account struct {
	appID, secret string
	perMinute     int
	stable        bool // fetch the token from /cgi-bin/stable_token
}

func TestAcceptanceManyAccounts(t *testing.T) {
	const path = "/cgi-bin/user/info"
	accounts := []account{
		{"wxAlpha", "sa", 300, false},
		{"wxBeta", "sb", 600, true}, // raised quotas
		{"wxGamma", "sc", 300, false},
	}
	emuOpts := wechattest.Options{
		TimeScale: accTimeScale, LatencyMax: accLatency,
		Apps: map[string]string{}, AppLimits: map[string]wechattest.Limits{},
		Limits: wechattest.Limits{PerMinute: map[string]int{"/cgi-bin/token": 1000}},
	}
	var cfgs []wechat.App
	for _, a := range accounts {
		emuOpts.Apps[a.appID] = a.secret
		emuOpts.AppLimits[a.appID] = wechattest.Limits{PerMinute: map[string]int{path: a.perMinute / accTimeScale}}
		cfgs = append(cfgs, wechat.App{AppID: a.appID, NoDefaultQuotas: true, PerMinute: map[string]int{path: a.perMinute / accTimeScale}})
	}
	emu := wechattest.NewServer(emuOpts)
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	set := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, TimeScale: accTimeScale, Apps: cfgs})
	clients, books := loadtest.AppReplicas(t, accReplicas, throttle.WithProfiles(set.Profile()))

	// Each account's token is fetched by one replica, used by all.
	tokens := make([]string, len(accounts))
	for k, a := range accounts {
		req, _ := http.NewRequest(http.MethodGet, emu.URL+"/cgi-bin/token?grant_type=client_credential&appid="+a.appID+"&secret="+a.secret, nil)
		if a.stable {
			req, _ = http.NewRequest(http.MethodPost, emu.URL+"/cgi-bin/stable_token",
				strings.NewReader(`{"grant_type":"client_credential","appid":"`+a.appID+`","secret":"`+a.secret+`","force_refresh":false}`))
		}
		tokens[k] = loadtest.FetchToken(t, clients[k%accReplicas], req, "access_token")
	}
	call := func(ctx context.Context, i, k int) loadtest.Result {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
			emu.URL+path+"?access_token="+tokens[k]+"&openid=o6_bmjrPTlm6_2sgVt7hMZOPfL2M&lang=zh_CN", nil)
		return loadtest.Send(clients[i], req, "errcode")
	}
	rates := make([]float64, len(accounts))
	for k, a := range accounts {
		rates[k] = accDemand * float64(a.perMinute) / 60
	}
	run := loadtest.Fire(accReplicas, accRun, rates, call)

	run.ExpectClean(t, loadtest.Answers(emu.Counters()), isQuotaCode)
	loadtest.ExpectAllKnown(t, books)
	recs := emu.Requests()
	for _, a := range accounts {
		var arrivals []loadtest.Arrival
		for _, r := range recs {
			if r.App == a.appID && r.Path == path && r.Code == 0 && r.Status == http.StatusOK {
				arrivals = append(arrivals, loadtest.Arrival{At: r.At, Emulated: r.Emulated})
			}
		}
		run.ExpectShare(t, a.appID, arrivals, float64(a.perMinute)/60, time.Minute, a.perMinute/accTimeScale)
	}
}
