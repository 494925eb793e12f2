package wechat_test

// Acceptance test of many accounts behind one Transport per replica: three
// AppIDs, one with raised quotas, called by an SDK-like client that fetches
// tokens from /cgi-bin/token and /cgi-bin/stable_token and then only sends
// them. Each replica learns the tokens' accounts from the exchanges or,
// for tokens another replica fetched, from Redis. Time is scaled as in
// acceptance_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

var sharedKey = []byte("test-key-0123456789abcdef0123456")

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
	var cfgs []wechat.Config
	for _, a := range accounts {
		emuOpts.Apps[a.appID] = a.secret
		emuOpts.AppLimits[a.appID] = wechattest.Limits{PerMinute: map[string]int{path: a.perMinute / accTimeScale}}
		cfgs = append(cfgs, wechat.Config{AppID: a.appID, Daily: map[string]int{}, PerMinute: map[string]int{path: a.perMinute / accTimeScale}})
	}
	emu := wechattest.NewServer(emuOpts)
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	set := wechat.MustApps(wechat.AppsConfig{
		Shared: wechat.Config{Hosts: []string{u.Hostname()}, TimeScale: accTimeScale}, // windows as fast as the emulator's
		Apps:   cfgs,
	})
	books := make([]*apps.Book, accReplicas)
	clients := loadtest.ReplicasWith(t, accReplicas, func(i int, rdb *redis.Client, prefix string) []throttle.Option {
		books[i] = apps.MustNew(apps.WithRedis(rdb, sharedKey), apps.WithPrefix(prefix))
		book := books[i]
		t.Cleanup(func() { book.Close() })
		return []throttle.Option{throttle.WithApps(books[i])}
	}, throttle.WithProfiles(set.Profile()))

	// Each account's token is fetched by one replica, used by all.
	tokens := make([]string, len(accounts))
	for k, a := range accounts {
		var req *http.Request
		if a.stable {
			req, _ = http.NewRequest(http.MethodPost, emu.URL+"/cgi-bin/stable_token",
				strings.NewReader(`{"grant_type":"client_credential","appid":"`+a.appID+`","secret":"`+a.secret+`","force_refresh":false}`))
		} else {
			req, _ = http.NewRequest(http.MethodGet, emu.URL+"/cgi-bin/token?grant_type=client_credential&appid="+a.appID+"&secret="+a.secret, nil)
		}
		resp, err := clients[k%accReplicas].Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ans struct {
			AccessToken string `json:"access_token"`
		}
		if json.Unmarshal(raw, &ans) != nil || ans.AccessToken == "" {
			t.Fatalf("token of %s: %s", a.appID, raw)
		}
		tokens[k] = ans.AccessToken
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
	start := time.Now()
	end := start.Add(accRun)
	ctx, cancel := loadtest.Until(end)
	results := loadtest.Drive(ctx, accReplicas, rates, call)
	cancel()

	cs := emu.Counters()
	tl := loadtest.Count(results, isQuotaCode)
	t.Logf("callers: %v", tl)
	t.Logf("emulator: %d requests, %d ok, error answers by code %v", cs.Total, cs.OK, cs.ByCode)
	for i, b := range books {
		s := b.Stats()
		t.Logf("replica %d: learned %d, %d Redis lookups (%d found, %d errors), %d unknown", i, s.Learned, s.RedisLookups, s.RedisFound, s.RedisErrors, s.Unknown)
		if s.Unknown != 0 {
			t.Errorf("replica %d charged %d calls to the unknown scope, want 0", i, s.Unknown)
		}
	}
	if cs.Total != cs.OK {
		t.Errorf("the emulator gave %d error answers (by code %v), want none", cs.Total-cs.OK, cs.ByCode)
	}
	tl.ExpectClean(t)
	recs := emu.Requests()
	for _, a := range accounts {
		var at []time.Time
		for _, r := range recs {
			if r.App == a.appID && r.Path == path && r.Code == 0 && r.Status == http.StatusOK && !r.At.Before(start) && r.At.Before(end) {
				at = append(at, r.At)
			}
		}
		rate := float64(a.perMinute) / 60
		got := loadtest.Measure(at, accRun)
		t.Logf("%-8s %4d successes in %v: %.2f/s = %.1f%% of its %.0f/s", a.appID, got.N, accRun, got.Rate, 100*got.Rate/rate, rate)
		got.Expect(t, fmt.Sprint(a.appID), rate)
	}
}
