package apps_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// Issue 22.3: exchanges were matched by path on every host: a
// pass-through GET other-host/gettoken?appkey=made-up wrote a 30-day
// mapping. Outside a Transport's profile, only the provider's hosts (and
// those given with WithHosts) are learned from.
func TestExchangesOnOtherHostsAreNotLearned(t *testing.T) {
	srv := exchangeServer(t, `{"errcode":0,"access_token":"made-up-token-1","expires_in":2592000}`)
	book := apps.MustNew(apps.Config{})
	client := &http.Client{Transport: book.Observe(http.DefaultTransport)}
	resp, err := client.Get(srv.URL + "/gettoken?appkey=made-up&appsecret=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if app, ok := book.Lookup(context.Background(), "made-up-token-1"); ok {
		t.Fatalf("learned %+v from an exchange with a host that is not DingTalk's", app)
	}
	// The same host given as DingTalk's is learned from.
	book = apps.MustNew(apps.Config{Hosts: map[string][]string{"dingtalk": {srv.Listener.Addr().String()}}})
	client = &http.Client{Transport: book.Observe(http.DefaultTransport)}
	resp, err = client.Get(srv.URL + "/gettoken?appkey=dingA&appsecret=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if app, ok := book.Lookup(context.Background(), "made-up-token-1"); !ok || app.ID != "dingA" {
		t.Fatalf("a host given with WithHosts: %+v, %v; want dingA", app, ok)
	}
}

// Issue 22.3: only answers that pass the provider's checks are learned.
func TestExchangeAnswersAreChecked(t *testing.T) {
	cases := []struct{ name, path, body, answer string }{
		{"dingtalk without errcode", "/gettoken?appkey=dingA", "", `{"access_token":"good-token-0001","expires_in":7200}`},
		{"dingtalk errcode as text", "/gettoken?appkey=dingA", "", `{"errcode":"0","access_token":"good-token-0001","expires_in":7200}`},
		{"new api error code", "/v1.0/oauth2/accessToken", `{"appKey":"dingA"}`, `{"code":"invalidClientIdOrSecret","accessToken":"good-token-0001","expireIn":7200}`},
		{"feishu without code", "/open-apis/auth/v3/tenant_access_token/internal", `{"app_id":"cli_a"}`, `{"tenant_access_token":"t-good-token-0001","expire":7200}`},
		{"token with a quote", "/cgi-bin/token?appid=wxA", "", `{"access_token":"bad\"token-0001","expires_in":7200}`},
		{"token with a space", "/cgi-bin/token?appid=wxA", "", `{"access_token":"bad token-0001","expires_in":7200}`},
		{"token too short", "/cgi-bin/token?appid=wxA", "", `{"access_token":"x","expires_in":7200}`},
		{"token too long", "/cgi-bin/token?appid=wxA", "", `{"access_token":"` + strings.Repeat("a", 2000) + `","expires_in":7200}`},
		{"no lifetime", "/cgi-bin/token?appid=wxA", "", `{"access_token":"good-token-0001"}`},
		{"negative lifetime", "/cgi-bin/token?appid=wxA", "", `{"access_token":"good-token-0001","expires_in":-5}`},
		{"400 days", "/cgi-bin/token?appid=wxA", "", `{"access_token":"good-token-0001","expires_in":34560000}`},
		{"app ID with a control character", "/cgi-bin/token?appid=wx%1FA", "", `{"access_token":"good-token-0001","expires_in":7200}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			book := apps.MustNew(withLoopback(apps.Config{}))
			srv := exchangeServer(t, tc.answer)
			client := &http.Client{Transport: book.Observe(http.DefaultTransport)}
			method := "GET"
			if tc.body != "" {
				method = "POST"
			}
			req, _ := http.NewRequest(method, srv.URL+tc.path, strings.NewReader(tc.body))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			for _, tok := range []string{"good-token-0001", "t-good-token-0001", "x", "bad token-0001", `bad"token-0001`, strings.Repeat("a", 2000)} {
				if app, ok := book.Lookup(context.Background(), tok); ok {
					t.Fatalf("learned %q as %+v from %s", tok, app, tc.answer)
				}
			}
		})
	}
}

// Issue 22.3: an exchange answer carrying another app's valid token moved
// that app's calls onto the first app's quota (last write wins, nothing
// logged). A token claimed for two apps is trusted for neither, on every
// replica, counted and logged once.
func TestTokenClaimedForTwoAppsIsTrustedForNeither(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ctx := context.Background()
	var logs bytes.Buffer
	book := func() *apps.Book {
		b := apps.MustNew(withLoopback(apps.Config{Redis: srv.Client(t), Key: testKey, Prefix: prefix, Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
		t.Cleanup(func() { b.Close() })
		return b
	}
	a, b := book(), book()
	const tok = "dingB-real-token-01"
	if err := a.Learn(ctx, tok, apps.App{Provider: "dingtalk", ID: "dingB"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	emu := exchangeServer(t, `{"errcode":0,"access_token":"`+tok+`","expires_in":7200}`)
	client := &http.Client{Transport: b.Observe(http.DefaultTransport)}
	for range 2 {
		resp, err := client.Get(emu.URL + "/gettoken?appkey=dingA&appsecret=x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	waitProcessed(t, a, 3) // its own announcement and b's two
	late := book()
	for name, r := range map[string]*apps.Book{"the first learner": a, "the second": b, "a later replica": late} {
		if app, ok := r.Lookup(ctx, tok); ok {
			t.Errorf("%s trusts the token claimed for two apps as %+v", name, app)
		}
	}
	if n := b.Stats().Conflicts; n != 2 {
		t.Errorf("Stats.Conflicts = %d, want 2", n)
	}
	if err := a.Learn(ctx, tok, apps.App{Provider: "dingtalk", ID: "dingB"}, time.Hour); !errors.Is(err, apps.ErrConflict) {
		t.Errorf("Learn of a conflicted token: %v, want ErrConflict", err)
	}
	if n := strings.Count(logs.String(), "claimed for two apps"); n != 2 { // once per Book
		t.Errorf("the conflict was logged %d times by two Books, want once each:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), tok) {
		t.Error("the token reached the log")
	}
}

// Issue 22.3: replicas with different hashing keys found nothing, silently.
// A replica whose key differs from the one the entries were written with
// says so at start (log, KeyCheck, Stats.KeyMismatch); New still succeeds,
// so that a key rotation can roll.
func TestKeyMismatchIsReportedAtStart(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	a := apps.MustNew(apps.Config{Redis: srv.Client(t), Key: testKey, Prefix: prefix, Logger: logger})
	defer a.Close()
	same := apps.MustNew(apps.Config{Redis: srv.Client(t), Key: testKey, Prefix: prefix, Logger: logger})
	defer same.Close()
	if a.KeyCheck() != nil || same.KeyCheck() != nil || logs.Len() != 0 {
		t.Fatalf("replicas with one key: %v, %v, logs %q", a.KeyCheck(), same.KeyCheck(), logs.String())
	}
	other, err := apps.New(apps.Config{Redis: srv.Client(t), Key: []byte("another-key-0123456789"), Prefix: prefix, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.KeyCheck(); !errors.Is(err, apps.ErrKeyMismatch) || !other.Stats().KeyMismatch {
		t.Fatalf("KeyCheck = %v, Stats.KeyMismatch = %v; want ErrKeyMismatch", err, other.Stats().KeyMismatch)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "Key differs") ||
		strings.Contains(logs.String(), "another-key") || strings.Contains(logs.String(), string(testKey)) {
		t.Fatalf("the log: %q; want one error naming the mismatch, no key", logs.String())
	}
}
