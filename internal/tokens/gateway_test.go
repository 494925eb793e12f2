package tokens

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// A WeChat call that carries its token in the query and, beside it, a
// gateway's own Bearer key is watched by the query's token: once WeChat
// refuses it, the calls still carrying it go with the fleet's token, and
// the gateway's key is left as it was. Before, the Bearer was read as the
// call's token, and the refused one was neither healed nor replaced.
//
// What is asserted is what the server received (a recording proxy in
// front of WeChat): the caller's own request is never changed (the
// replacement is a copy), so it cannot tell whether the copy sent kept
// the gateway's key.
func TestGatewayBearerBesideTheQueryToken(t *testing.T) {
	f, old, cur := rotated(t)
	const gateway = "Bearer gw-KEY-0123456789"
	type received struct{ auth, token string }
	var (
		mu  sync.Mutex
		got []received
	)
	target, err := url.Parse(f.emu.URL)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	recorder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, received{r.Header.Get("Authorization"), r.URL.Query().Get("access_token")})
		mu.Unlock()
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(recorder.Close)
	call := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, recorder.URL+"/cgi-bin/user/info?access_token="+url.QueryEscape(old), strings.NewReader("{}"))
		req.Header.Set("Authorization", gateway)
		resp, err := f.clients[1].Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a tokenAnswer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a.ErrCode
	}
	if code := call(); code != wechattest.CodeInvalidToken {
		t.Fatalf("the first call with the refused token: errcode %d, want %d as WeChat answered it", code, wechattest.CodeInvalidToken)
	}
	for i := range 3 {
		if code := call(); code != 0 {
			t.Fatalf("call %d after the refusal: errcode %d, want 0 (sent with the fleet's token; stats %+v)", i, code, f.sharers[1].Stats())
		}
	}
	if st := f.sharers[1].Stats(); st.Replaced != 3 {
		t.Fatalf("stats %+v, want 3 replaced", st)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []received{{gateway, old}, {gateway, cur}, {gateway, cur}, {gateway, cur}}
	if len(got) != len(want) {
		t.Fatalf("the server received %d calls %q, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("call %d reached the server with Authorization %q and access_token %q, want %q and %q (the refused token %q, the fleet's %q)",
				i, got[i].auth, got[i].token, want[i].auth, want[i].token, old, cur)
		}
	}
}
