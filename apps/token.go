package apps

import (
	"net/http"
	"net/url"
	"strings"
)

// Token returns the access token a request carries where the providers put
// it: the header x-acs-dingtalk-access-token (DingTalk's new API), an
// Authorization: Bearer header (Feishu), or the query parameter
// access_token (DingTalk's old API, WeChat, WeCom). It reads no body.
func Token(req *http.Request) string {
	if v := req.Header["X-Acs-Dingtalk-Access-Token"]; len(v) > 0 && v[0] != "" {
		return v[0]
	}
	if v := req.Header["Authorization"]; len(v) > 0 {
		if tok, ok := cutPrefixFold(v[0], "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
	}
	if req.URL != nil {
		return queryValue(req.URL.RawQuery, "access_token")
	}
	return ""
}

// queryValue finds one parameter without parsing the whole query (which
// allocates a map per request).
func queryValue(q, name string) string {
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k != name {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			if u, err := url.QueryUnescape(v); err == nil {
				return u
			}
		}
		return v
	}
	return ""
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}
