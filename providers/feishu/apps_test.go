package feishu_test

// Acceptance test of many apps behind one Transport per replica: two
// internal apps (tenant_access_token/internal) and a store app installed by
// three tenants (app_access_token, then tenant_access_token per tenant),
// called by an SDK-like client that only sends the tokens. Each replica
// learns the tokens' apps and tenants from the exchanges or from Redis.

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
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

var sharedKey = []byte("test-key-0123456789abcdef0123456")

func TestAcceptanceManyAppsAndTenants(t *testing.T) {
	api := accAPIs[1] // POST /open-apis/im/v1/chats, level 6: 5/s per app (per tenant)
	published := publishedPerSecond[api.level]
	type cred struct{ app, tenant string }
	creds := []cred{{"cli_alpha", ""}, {"cli_beta", ""}, {"cli_store", "tenantA"}, {"cli_store", "tenantB"}, {"cli_store", "tenantC"}}
	owner := func(c cred) string {
		if c.tenant != "" {
			return c.app + "@" + c.tenant
		}
		return c.app
	}

	emu := feishutest.NewServer(feishutest.Options{APIs: map[string]int{api.pattern: api.level}, LatencyMax: accLatency})
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	perApp := func(id string) feishu.Config {
		return feishu.Config{AppID: id, Levels: feishu.LevelTable(), APIs: map[string]int{api.pattern: api.level}}
	}
	set := feishu.MustApps(feishu.AppsConfig{
		Shared: feishu.Config{Hosts: []string{u.Hostname()}},
		Apps:   []feishu.Config{perApp("cli_alpha"), perApp("cli_beta"), perApp("cli_store")},
	})
	books := make([]*apps.Book, accReplicas)
	clients := loadtest.ReplicasWith(t, accReplicas, func(i int, rdb *redis.Client, prefix string) []throttle.Option {
		books[i] = apps.MustNew(apps.WithRedis(rdb, sharedKey), apps.WithPrefix(prefix))
		book := books[i]
		t.Cleanup(func() { book.Close() })
		return []throttle.Option{throttle.WithApps(books[i])}
	}, throttle.WithProfiles(set.Profile()))

	post := func(c *http.Client, path, body, member string) string {
		t.Helper()
		resp, err := c.Post(emu.URL+path, "application/json; charset=utf-8", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		tok, _ := m[member].(string)
		if tok == "" {
			t.Fatalf("%s: %s", path, raw)
		}
		return tok
	}
	appToken := post(clients[0], "/open-apis/auth/v3/app_access_token",
		`{"app_id":"cli_store","app_secret":"s","app_ticket":"tk"}`, "app_access_token")
	tokens := make([]string, len(creds))
	for k, c := range creds {
		cl := clients[k%accReplicas]
		if c.tenant != "" {
			tokens[k] = post(cl, "/open-apis/auth/v3/tenant_access_token",
				`{"app_access_token":"`+appToken+`","tenant_key":"`+c.tenant+`"}`, "tenant_access_token")
		} else {
			tokens[k] = post(cl, "/open-apis/auth/v3/tenant_access_token/internal",
				`{"app_id":"`+c.app+`","app_secret":"s"}`, "tenant_access_token")
		}
	}
	call := func(ctx context.Context, i, k int) loadtest.Result {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, emu.URL+api.path+"?user_id_type=open_id",
			strings.NewReader(`{"name":"release","chat_mode":"group","chat_type":"private"}`))
		req.Header.Set("Authorization", "Bearer "+tokens[k])
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		return loadtest.Send(clients[i], req, "code")
	}
	rates := make([]float64, len(creds))
	for k := range creds {
		rates[k] = accDemand * published
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
	for _, c := range creds {
		var at []time.Time
		for _, r := range recs {
			if r.App == owner(c) && r.Path == api.pattern && r.Code == 0 && r.Status == http.StatusOK && !r.At.Before(start) && r.At.Before(end) {
				at = append(at, r.At)
			}
		}
		got := loadtest.Measure(at, accRun)
		t.Logf("%-18s %4d successes in %v: %.2f/s = %.1f%% of its %.0f/s (sustained %.2f/s)",
			owner(c), got.N, accRun, got.Rate, 100*got.Rate/published, published, got.Sustained)
		got.Expect(t, owner(c), published)
	}
}
