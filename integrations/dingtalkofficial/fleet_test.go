package dingtalkofficial_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	contact "github.com/alibabacloud-go/dingtalk/contact_1_0"
	oauth2 "github.com/alibabacloud-go/dingtalk/oauth2_1_0"
	util "github.com/alibabacloud-go/tea-utils/v2/service"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/integrations/dingtalkofficial"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// fleetCreds are what one restart exchanges: an app's key and secret, or a
// suite's key and secret in a customer org.
type fleetCreds struct{ key, secret, org string }

// token is one exchange through the SDK: /v1.0/oauth2/accessToken for an
// app, /v1.0/oauth2/corpAccessToken for a suite in an org.
func (c fleetCreds) token(rt http.RoundTripper) (string, error) {
	auth, err := oauth2.NewClient(dingtalkofficial.Config(rt))
	if err != nil {
		return "", err
	}
	if c.org == "" {
		r, err := auth.GetAccessToken(&oauth2.GetAccessTokenRequest{AppKey: ptr(c.key), AppSecret: ptr(c.secret)})
		if err != nil {
			return "", err
		}
		return *r.Body.AccessToken, nil
	}
	r, err := auth.GetCorpAccessToken(&oauth2.GetCorpAccessTokenRequest{
		SuiteKey: ptr(c.key), SuiteSecret: ptr(c.secret), AuthCorpId: ptr(c.org), SuiteTicket: ptr("ticket")})
	if err != nil {
		return "", err
	}
	return *r.Body.AccessToken, nil
}

// restart is what one replica does with c at a restart: new clients, a
// token fetched, one call with it (errors are counted at the emulator).
func (c fleetCreds) restart(t *testing.T, rt http.RoundTripper) {
	tok, err := c.token(rt)
	if err != nil {
		return
	}
	contacts, err := contact.NewClient(dingtalkofficial.Config(rt))
	if err != nil {
		t.Error(err)
		return
	}
	_, _ = contacts.GetUserWithOptions(ptr("manager4220"),
		&contact.GetUserHeaders{XAcsDingtalkAccessToken: ptr(tok)}, &util.RuntimeOptions{})
}

// Six replicas of a service using the official SDK through the adapter
// (a client per instance: one Transport per replica, in one process), two
// apps and an ISV suite in three customer orgs, each replica recreating
// its clients and fetching its tokens anew every 200 ms for 2 s
// (production's 2 s for 20 s, time-scaled): one exchange per app and per
// org at DingTalk for the fleet and no invalid-token answer; an app's and
// an org's tokens revoked mid-run each heal with one more exchange.
//
// DingTalk returns the same token within its lifetime, so replicas
// fetching for themselves (THROTTLE_FLEET_UNSHARED) invalidate nothing:
// they spend the exchanges' limits, one per restart.
func TestFleetSharesTokens(t *testing.T) {
	const suite, suiteSecret = "suitefleet000001", "FLEETSECRET-5b8a"
	creds := []fleetCreds{
		{key: "dingfleetappaaaa", secret: "FLEETSECRET-7d2e"}, {key: "dingfleetappbbbb", secret: "FLEETSECRET-91fc"},
		{key: suite, secret: suiteSecret, org: "dingcorp0001"}, {key: suite, secret: suiteSecret, org: "dingcorp0002"},
		{key: suite, secret: suiteSecret, org: "dingcorp0003"},
	}
	revoke := []fleetCreds{creds[0], creds[2]}
	// Apps of the exclusive edition (60 calls/s per API); six replicas
	// restarting every 200 ms call each API 30 times a second per app and
	// per org (a suite's limit in an org is 40).
	emu := dingtalktest.New(dingtalktest.Options{QPS: 60,
		Apps:   map[string]string{creds[0].key: creds[0].secret, creds[1].key: creds[1].secret},
		Suites: map[string]string{suite: suiteSecret}})
	defer emu.Close()
	srv := redistest.Start(t)
	prefix := "fleet" + strconv.FormatInt(time.Now().UnixNano(), 36)
	set := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{
		{AppKey: creds[0].key, Edition: dingtalk.Exclusive}, {AppKey: creds[1].key, Edition: dingtalk.Exclusive},
		{AppKey: suite, ISV: true}}})
	fleet := sdktest.Fleet{Replicas: 6, Rounds: 10, Period: 200 * time.Millisecond}
	// The last Transport reads the tokens to revoke.
	transports := sdktest.Transports(t, fleet.Replicas+1, func() redis.UniversalClient { return srv.Client(t) }, prefix, emu.URL, set.Profile())

	start := time.Now()
	revokedAt := fleet.Run(func(r int) {
		for _, c := range creds { // a restart: new clients, no token
			c.restart(t, transports[r])
		}
	}, func() {
		for _, c := range revoke {
			tok, err := c.token(transports[fleet.Replicas])
			if err != nil {
				t.Error(err)
				return
			}
			emu.Revoke(tok)
		}
	})
	invalidBefore, invalidAfter := sdktest.Split(emu.Requests(), revokedAt, func(r dingtalktest.Record) (time.Time, bool) {
		return r.At, r.Code == "40014" || r.Code == "InvalidAuthentication"
	})
	fetches := map[string]int{}
	for _, c := range creds {
		fetches[c.key+"/"+c.org] = emu.Fetches(c.key, c.org)
	}
	t.Logf("%d replicas x %d restarts x %d apps and %d orgs in %v (shared tokens %v): exchanges %v; invalid-token answers %d before the revocation, %d after",
		fleet.Replicas, fleet.Rounds, 2, 3, time.Since(start).Round(time.Millisecond), !sdktest.Unshared(),
		fetches, invalidBefore, invalidAfter)
	if sdktest.Unshared() {
		return
	}
	if invalidBefore != 0 {
		t.Errorf("%d invalid-token answers before the revocation, want 0", invalidBefore)
	}
	for i, c := range creds {
		want := 1
		if i == 0 || i == 2 {
			want = 2 // one to heal the revoked token
		}
		if n := emu.Fetches(c.key, c.org); n != want {
			t.Errorf("%s in %q: %d exchanges, want %d", c.key, c.org, n, want)
		}
	}
}
