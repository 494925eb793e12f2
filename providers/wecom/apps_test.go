package wecom_test

// Acceptance test of many companies behind one Transport per replica: two
// companies of the service's own (gettoken) and a third-party suite that
// two more companies authorised (get_suite_token, then get_corp_token per
// company), called by an SDK-like client that only sends the tokens. Each
// replica learns the tokens' companies from the exchanges or from Redis.
// Time is scaled as in acceptance_test.go.

import (
	"context"
	"encoding/json"
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
	"github.com/quotaware/throttle/providers/wecom"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

var sharedKey = []byte("test-key-0123456789abcdef0123456")

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
	shared := wecom.Config{
		CorpPerMinute: 300 / accTimeScale, CorpPerHour: wecom.DefaultCorpPerHour / accTimeScale,
		IPPerMinute: wecom.DefaultIPPerMinute / accTimeScale, IPPerHour: wecom.DefaultIPPerHour / accTimeScale,
		TimeScale: accTimeScale,
	}
	emuOpts := wecomtest.Options{
		TimeScale: accTimeScale, LatencyMax: accLatency,
		Limits: wecomtest.Limits{
			CorpPerHour: wecom.DefaultCorpPerHour / accTimeScale,
			IPPerMinute: wecom.DefaultIPPerMinute / accTimeScale, IPPerHour: wecom.DefaultIPPerHour / accTimeScale,
		},
		CorpLimits: map[string]wecomtest.Limits{},
	}
	for _, c := range companies {
		emuOpts.CorpLimits[c.corp] = wecomtest.Limits{CorpPerMinute: c.perMinute / accTimeScale, CorpPerHour: wecom.DefaultCorpPerHour / accTimeScale}
	}
	emu := wecomtest.NewServer(emuOpts)
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	shared.Hosts = []string{u.Hostname()}
	set := wecom.MustApps(wecom.AppsConfig{
		Shared: shared,
		Corps: []wecom.Config{{CorpID: "wwOwnA", CorpPerMinute: 600 / accTimeScale, CorpPerHour: shared.CorpPerHour},
			{CorpID: "wwOwnB", CorpPerMinute: 300 / accTimeScale, CorpPerHour: shared.CorpPerHour}},
	})
	books := make([]*apps.Book, accReplicas)
	clients := loadtest.ReplicasWith(t, accReplicas, func(i int, rdb *redis.Client, prefix string) []throttle.Option {
		books[i] = apps.MustNew(apps.WithRedis(rdb, sharedKey), apps.WithPrefix(prefix))
		book := books[i]
		t.Cleanup(func() { book.Close() })
		return []throttle.Option{throttle.WithApps(books[i])}
	}, throttle.WithProfiles(set.Profile()))

	fetch := func(c *http.Client, method, target, body, member string) string {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, emu.URL+target, rd)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		tok, _ := m[member].(string)
		if tok == "" {
			t.Fatalf("%s: %s", target, raw)
		}
		return tok
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
	for _, c := range companies {
		var at, emulated []time.Time
		for _, r := range recs {
			if r.App == c.corp && r.Path == path && r.Code == 0 && r.Status == http.StatusOK && !r.At.Before(start) && r.At.Before(end) {
				at = append(at, r.At)
				emulated = append(emulated, r.Emulated)
			}
		}
		rate := float64(c.perMinute) / 60
		got := loadtest.Measure(at, accRun)
		first := time.Duration(0)
		if len(at) > 0 {
			first = at[0].Sub(start)
		}
		t.Logf("%-12s %4d successes in %v: %.2f/s = %.1f%% of its %.0f/s (sustained %.2f/s, first after %v); busiest emulated minute %d",
			c.corp, got.N, accRun, got.Rate, 100*got.Rate/rate, rate, got.Sustained, first.Round(time.Millisecond), loadtest.Busiest(emulated, time.Minute))
		got.Expect(t, c.corp, rate)
	}
}
