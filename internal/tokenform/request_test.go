package tokenform

import (
	"net/http"
	"testing"
)

// The query's access_token is the token of a call that carries one, a
// Bearer beside it being someone else's (a gateway's own key): the
// providers that take the token in the query take no Bearer. Read first,
// the Bearer hid the provider's token from the heal, the replacement of a
// refused token and the learning of whose app the call is.
func TestQueryTokenBeforeAnotherBearer(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		header    http.Header
		want      string
	}{
		{"wechat behind a gateway", "https://api.weixin.qq.com/cgi-bin/user/info?access_token=WX-TOKEN-1&openid=o1",
			http.Header{"Authorization": {"Bearer gw-KEY-0123456789"}}, "WX-TOKEN-1"},
		{"lower-case authorization", "https://qyapi.weixin.qq.com/cgi-bin/user/get?userid=u&access_token=WW-TOKEN-1",
			http.Header{"authorization": {"bearer gw-KEY-0123456789"}}, "WW-TOKEN-1"},
		{"bearer alone", "https://open.feishu.cn/open-apis/im/v1/messages",
			http.Header{"Authorization": {"Bearer t-FEISHU-1"}}, "t-FEISHU-1"},
		{"bearer beside another query parameter", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id",
			http.Header{"Authorization": {"Bearer t-FEISHU-1"}}, "t-FEISHU-1"},
		{"empty query token", "https://open.feishu.cn/open-apis/im/v1/messages?access_token=",
			http.Header{"Authorization": {"Bearer t-FEISHU-1"}}, "t-FEISHU-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header[k] = v
			}
			if got := FromRequest(req); got != tc.want {
				t.Fatalf("FromRequest = %q, want %q", got, tc.want)
			}
		})
	}
}
