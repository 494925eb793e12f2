package tokens

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// A WeChat call that carries its token in the query and, beside it, a
// gateway's own Bearer key is watched by the query's token: once WeChat
// refuses it, the calls still carrying it go with the fleet's token, and
// the gateway's key is left as it was. Before, the Bearer was read as the
// call's token, and the refused one was neither healed nor replaced.
func TestGatewayBearerBesideTheQueryToken(t *testing.T) {
	f, old, _ := rotated(t)
	const gateway = "Bearer gw-KEY-0123456789"
	call := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.emu.URL+"/cgi-bin/user/info?access_token="+url.QueryEscape(old), strings.NewReader("{}"))
		req.Header.Set("Authorization", gateway)
		resp, err := f.clients[1].Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if got := req.Header.Get("Authorization"); got != gateway {
			t.Fatalf("the caller's Authorization now reads %q", got)
		}
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
}
