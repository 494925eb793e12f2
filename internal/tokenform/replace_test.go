package tokenform

import (
	"net/http"
	"net/url"
	"testing"
)

// Replace puts the new token wherever the request carried the old one, and
// only there; the request it was given stays as it was.
func TestReplace(t *testing.T) {
	const old, tok = "old-token+1/A==", "new-token+2/B=="
	for _, tc := range []struct {
		name      string
		url       string
		header    http.Header
		wantQuery string
		wantHdr   http.Header
	}{
		{name: "query", url: "https://api.weixin.qq.com/cgi-bin/user/info?openid=o1&access_token=" + url.QueryEscape(old) + "&lang=zh_CN",
			wantQuery: "openid=o1&access_token=" + url.QueryEscape(tok) + "&lang=zh_CN"},
		{name: "query unescaped", url: "https://qyapi.weixin.qq.com/cgi-bin/user/get?access_token=old-token%2B1/A%3D%3D&userid=u",
			wantQuery: "access_token=" + url.QueryEscape(tok) + "&userid=u"},
		{name: "suite token", url: "https://qyapi.weixin.qq.com/cgi-bin/service/get_corp_token?suite_access_token=" + url.QueryEscape(old),
			wantQuery: "suite_access_token=" + url.QueryEscape(tok)},
		{name: "another token left alone", url: "https://api.weixin.qq.com/cgi-bin/user/info?access_token=someone-else&x=" + url.QueryEscape(old),
			wantQuery: "access_token=someone-else&x=" + url.QueryEscape(old)},
		{name: "odd query kept byte for byte", url: "https://oapi.dingtalk.com/topapi/v2/user/get?a&&b=%zz&access_token=" + url.QueryEscape(old),
			wantQuery: "a&&b=%zz&access_token=" + url.QueryEscape(tok)},
		{name: "dingtalk header", url: "https://api.dingtalk.com/v1.0/contact/users/me",
			header: http.Header{"X-Acs-Dingtalk-Access-Token": {old}}, wantHdr: http.Header{"X-Acs-Dingtalk-Access-Token": {tok}}},
		{name: "dingtalk header in lower case", url: "https://api.dingtalk.com/v1.0/contact/users/me",
			header: http.Header{"x-acs-dingtalk-access-token": {old}}, wantHdr: http.Header{"x-acs-dingtalk-access-token": {tok}}},
		{name: "bearer", url: "https://open.feishu.cn/open-apis/im/v1/messages",
			header: http.Header{"Authorization": {"Bearer " + old}, "X-Other": {old}}, wantHdr: http.Header{"Authorization": {"Bearer " + tok}, "X-Other": {old}}},
		{name: "bearer in other cases", url: "https://open.feishu.cn/open-apis/im/v1/messages",
			header: http.Header{"authorization": {"bearer " + old}}, wantHdr: http.Header{"authorization": {"bearer " + tok}}},
		{name: "another scheme left alone", url: "https://open.feishu.cn/open-apis/im/v1/messages",
			header: http.Header{"Authorization": {"Basic " + old}}, wantHdr: http.Header{"Authorization": {"Basic " + old}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header[k] = append([]string(nil), v...)
			}
			before, beforeHdr := req.URL.RawQuery, req.Header.Clone()
			got := Replace(req, old, tok)
			if got.URL.RawQuery != tc.wantQuery && tc.wantHdr == nil {
				t.Errorf("query %q, want %q", got.URL.RawQuery, tc.wantQuery)
			}
			for k, v := range tc.wantHdr {
				if g := got.Header[k]; len(g) != 1 || g[0] != v[0] {
					t.Errorf("header %s = %q, want %q", k, g, v)
				}
			}
			if req.URL.RawQuery != before || len(req.Header) != len(beforeHdr) {
				t.Fatalf("the request given was changed: %q %v", req.URL.RawQuery, req.Header)
			}
			for k, v := range beforeHdr {
				if req.Header[k][0] != v[0] {
					t.Fatalf("the request given was changed: header %s = %q", k, req.Header[k])
				}
			}
			if tc.wantHdr == nil && FromRequest(got) != tok && tc.name != "another token left alone" && tc.name != "suite token" {
				t.Errorf("FromRequest of the copy = %q, want the new token", FromRequest(got))
			}
		})
	}
}
