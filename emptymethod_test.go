package throttle_test

import (
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// A request built as a struct literal has no Method, which net/http sends
// as GET. Read as "" (before), a catalogued GET API of DingTalk fell to the
// uncatalogued stand-in, and WeChat's /cgi-bin/token exchange was never
// shared: every replica fetched, and each fetch invalidated the others'
// tokens.
func TestEmptyMethodIsGET(t *testing.T) {
	t.Run("catalog route", func(t *testing.T) {
		o := newObservability(t)
		srv := serve(t, &recorder{answer: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{}`) }})
		u, _ := url.Parse(srv.URL)
		set := dingtalk.MustNew(dingtalk.Config{Hosts: []string{u.Host}, Apps: []dingtalk.App{{AppKey: "dingOnly"}}})
		c := &http.Client{Transport: throttle.MustNew(append(o.opts, throttle.WithProfiles(set.Profile()))...)}
		// A catalogued GET API sent without a Method, then a path no
		// catalog knows: only the second is uncatalogued.
		for _, path := range []string{"/v1.0/contact/users/u1", "/v1.0/no/such/api"} {
			target, _ := url.Parse(srv.URL + path)
			resp, err := c.Do(&http.Request{URL: target, Header: http.Header{"X-Acs-Dingtalk-Access-Token": {"tok"}}})
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if got := counts(t, o.metrics(t)["throttle.requests.uncatalogued"], "provider"); got["dingtalk"] != 1 {
			t.Fatalf("throttle.requests.uncatalogued = %v, want dingtalk: 1", got)
		}
	})
	t.Run("shared token exchange", func(t *testing.T) {
		f := newTokenFleet(t, 2)
		target, _ := url.Parse(fleetTokenURL(f.emu))
		for r := range 2 {
			resp, err := f.clients[r].Do(&http.Request{URL: target})
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if n := f.emu.Fetches(fleetApps[0], "/cgi-bin/token"); n != 1 {
			t.Fatalf("%d fetches at WeChat for two replicas, want 1", n)
		}
	})
}
