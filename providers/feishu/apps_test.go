package feishu_test

// Acceptance test of many apps behind one Transport per replica: two
// internal apps (tenant_access_token/internal) and a store app installed by
// three tenants (app_access_token, then tenant_access_token per tenant),
// called by an SDK-like client that only sends the tokens. Each replica
// learns the tokens' apps and tenants from the exchanges or from Redis.

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

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
	perApp := func(id string) feishu.App {
		return feishu.App{AppID: id, Levels: feishu.LevelTable(), APIs: map[string]int{api.pattern: api.level}}
	}
	// Jitter is fixed: see loadtest.AppsJitter.
	set := feishu.MustNew(feishu.Config{Hosts: []string{u.Hostname()}, Jitter: loadtest.AppsJitter, Apps: []feishu.App{perApp("cli_alpha"), perApp("cli_beta"), perApp("cli_store")}})
	clients, books := loadtest.AppReplicas(t, accReplicas, throttle.WithProfiles(set.Profile()))

	post := func(c *http.Client, path, body, member string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, emu.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		return loadtest.FetchToken(t, c, req, member)
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
	run := loadtest.Fire(accReplicas, accRun, rates, call)

	run.ExpectClean(t, loadtest.Answers(emu.Counters()), isQuotaCode)
	loadtest.ExpectAllKnown(t, books)
	recs := emu.Requests()
	for _, c := range creds {
		var arrivals []loadtest.Arrival
		for _, r := range recs {
			if r.App == owner(c) && r.Path == api.pattern && r.Code == 0 && r.Status == http.StatusOK {
				arrivals = append(arrivals, loadtest.Arrival{At: r.At, Emulated: r.Emulated})
			}
		}
		run.ExpectShare(t, owner(c), arrivals, published, time.Second, int(published))
	}
}
