package tokens

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

// A WeCom suite's token kept for the fleet heals like an access token: it
// travels as suite_access_token, and WeCom answers 42009 once it is no
// longer valid. It used to stay handed out until the kept answer ended
// (about two hours), every get_corp_token failing meanwhile.
func TestDeadSuiteTokenHeals(t *testing.T) {
	srv := redistest.Start(t)
	emu := wecomtest.NewServer(wecomtest.Options{})
	t.Cleanup(emu.Close)
	s, err := New(srv.Client(t), WithPrefix("suite"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: s.Wrap(http.DefaultTransport)}
	post := jsonPoster(t, c, emu.URL)
	const suite = `{"suite_id":"s1","suite_secret":"SUITE-SECRET-1","suite_ticket":"t1"}`
	first, _ := post("/cgi-bin/service/get_suite_token", suite)["suite_access_token"].(string)
	if first == "" {
		t.Fatal("no suite token")
	}
	emu.Revoke(first)
	got := post("/cgi-bin/service/get_corp_token?suite_access_token="+url.QueryEscape(first), `{"auth_corpid":"ww2","permanent_code":"P"}`)
	if code, _ := got["errcode"].(float64); code != 42009 {
		t.Fatalf("get_corp_token with the revoked suite token: %v, want errcode 42009", got)
	}
	again, _ := post("/cgi-bin/service/get_suite_token", suite)["suite_access_token"].(string)
	if again == "" || again == first {
		t.Fatalf("after WeCom refused it, the exchange hands out the dead suite token again (stats %+v)", s.Stats())
	}
	if st := s.Stats(); st.Healed != 1 {
		t.Fatalf("stats %+v, want one heal", st)
	}
	if got := post("/cgi-bin/service/get_corp_token?suite_access_token="+url.QueryEscape(again), `{"auth_corpid":"ww2","permanent_code":"P"}`); got["access_token"] == nil {
		t.Fatalf("get_corp_token with the new suite token: %v", got)
	}
}

// jsonPoster returns a function that POSTs a JSON body to base+path
// through c and decodes the JSON answer, failing t on any error.
func jsonPoster(t *testing.T, c *http.Client, base string) func(path, body string) map[string]any {
	return func(path, body string) map[string]any {
		t.Helper()
		resp, err := c.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
}
