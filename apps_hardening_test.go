package throttle_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// Issue 22.3 through the Transport: an exchange is learned when the
// provider's profile matched it (an emulator's host), never when it passed
// through to another host, whatever its path and answer.
func TestTransportLearnsOnlyFromTheProfilesHosts(t *testing.T) {
	emu := dingtalktest.New(dingtalktest.Options{Apps: map[string]string{"dingA": "secretA"}})
	defer emu.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"errcode":0,"access_token":"made-up-token-01","expires_in":2592000}`)
	}))
	defer other.Close()
	set := dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "dingA"}}})
	tr := throttle.MustNew(throttle.WithProfiles(set.Profile()), throttle.WithApps(apps.Config{}), throttle.WithoutTelemetry())
	book, client := tr.Apps(), &http.Client{Transport: tr}
	get := func(u string) string {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	get(other.URL + "/gettoken?appkey=made-up&appsecret=x")
	ctx := context.Background()
	if app, ok := book.Lookup(ctx, "made-up-token-01"); ok {
		t.Fatalf("learned %+v from an exchange with a host no profile matched", app)
	}
	answer := get(emu.URL + "/gettoken?appkey=dingA&appsecret=secretA")
	tok := answer[strings.Index(answer, `"access_token":"`)+len(`"access_token":"`):]
	tok = tok[:strings.IndexByte(tok, '"')]
	if app, ok := book.Lookup(ctx, tok); !ok || app.ID != "dingA" {
		t.Fatalf("the profile's exchange: %+v, %v; want dingA (answer %s)", app, ok, answer)
	}
}

// Issue 21.2 through the Transport: DingTalk's official SDK sets its token
// header through the map in lower case; the Transport charges the call to
// the token's app (nothing unknown), and a call with no token it can read
// is counted in throttle.apps.unknown.
func TestTransportReadsTheLowerCaseHeader(t *testing.T) {
	emu := dingtalktest.New(dingtalktest.Options{Apps: map[string]string{"dingA": "secretA", "dingB": "secretB"}})
	defer emu.Close()
	set := dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "dingA"}, {AppKey: "dingB"}}})
	var routed []string
	p := set.Profile()
	route := p.Route
	p.Route = func(req *http.Request) (providers.Route, error) {
		r, err := route(req)
		if err == nil && strings.HasPrefix(req.URL.Path, "/v1.0/contact/") {
			routed = append(routed, strings.Join(r.Scopes, " "))
		}
		return r, err
	}
	tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithApps(apps.Config{}), throttle.WithoutTelemetry())
	book, client := tr.Apps(), &http.Client{Transport: tr}
	do := func(req *http.Request) string {
		t.Helper()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	req, _ := http.NewRequest("POST", emu.URL+"/v1.0/oauth2/accessToken", strings.NewReader(`{"appKey":"dingB","appSecret":"secretB"}`))
	req.Header["content-type"] = []string{"application/json"}
	answer := do(req)
	tok := answer[strings.Index(answer, `"accessToken":"`)+len(`"accessToken":"`):]
	tok = tok[:strings.IndexByte(tok, '"')]

	req, _ = http.NewRequest("GET", emu.URL+"/v1.0/contact/users/u1", nil)
	req.Header["x-acs-dingtalk-access-token"] = []string{tok} // as darabonba/tea sets it
	do(req)
	if s := book.Stats(); s.Unknown != 0 || len(routed) != 1 || !strings.Contains(routed[0], "dingB") {
		t.Fatalf("a lower-case header: routed to %q, %d unknown; want dingB's scopes, 0 unknown", routed, s.Unknown)
	}
	req, _ = http.NewRequest("GET", emu.URL+"/v1.0/contact/users/u1", nil)
	req.Header["x-acs-dingtalk-token"] = []string{tok} // a place no SDK uses
	do(req)
	if s := book.Stats(); s.Unknown != 1 || s.NoToken != 1 {
		t.Fatalf("a call with no readable token: %d unknown, %d without a token; want 1 and 1", s.Unknown, s.NoToken)
	}
}
