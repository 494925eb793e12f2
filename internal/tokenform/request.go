package tokenform

import (
	"net/http"
	"strings"

	"github.com/quotaware/throttle/providers"
)

// Header names the tokens travel in, canonical and as SDKs that set the
// header map directly write them (DingTalk's official SDK, darabonba/tea:
// Header["x-acs-dingtalk-access-token"] = ..., which Header.Get misses).
const (
	dingtalkHeader      = "X-Acs-Dingtalk-Access-Token"
	dingtalkHeaderLower = "x-acs-dingtalk-access-token"
)

// FromRequest returns the access token a request carries where the providers put
// it: the query parameter access_token (DingTalk's old API, WeChat,
// WeCom), the header x-acs-dingtalk-access-token (DingTalk's new API), an
// Authorization: Bearer header (Feishu), header names in any case (as set
// through the header map, bypassing canonicalisation). It reads no body:
// FormBody reads DingTalk's documented form field.
//
// The query comes first: the providers that take the token there take no
// Bearer, so a Bearer beside it is someone else's (a gateway's or a
// proxy's own key, set on every request it forwards), and read first it
// hid the provider's token from the heal and the replacement of a refused
// one, and from learning whose app the call is.
func FromRequest(req *http.Request) string {
	if req.URL != nil {
		if tok := QueryValue(req.URL.RawQuery, "access_token"); tok != "" {
			return tok
		}
	}
	if tok := headerToken(req.Header, dingtalkHeader, "Authorization"); tok != "" {
		return tok
	}
	// The rare header set in another case: one pass over the keys, only
	// for requests nothing above named.
	for k, v := range req.Header {
		if len(v) == 0 || (k != dingtalkHeaderLower && k != "authorization" && !strings.EqualFold(k, dingtalkHeader) &&
			!strings.EqualFold(k, "Authorization")) {
			continue
		}
		if tok := headerValue(k, v[0]); tok != "" {
			return tok
		}
	}
	return ""
}

// maxFormPeek bounds what FormBody reads of a form body for its token: the
// field is documented among a call's first few.
const maxFormPeek = 4 << 10

// FormBody returns the access_token field of a form body
// (application/x-www-form-urlencoded), as some DingTalk old-API calls
// carry their token, read from a bounded prefix that leaves the body as it
// was; "" for a request of another kind.
func FormBody(req *http.Request) string {
	if req.Body == nil || req.Body == http.NoBody ||
		!strings.HasPrefix(strings.ToLower(Header(req.Header, "Content-Type")), "application/x-www-form-urlencoded") {
		return ""
	}
	prefix, _ := providers.PeekRequestBody(req, maxFormPeek)
	return QueryValue(string(prefix), "access_token")
}

// headerToken reads the token from the canonical keys.
func headerToken(h http.Header, keys ...string) string {
	for _, k := range keys {
		if v := h[k]; len(v) > 0 {
			if tok := headerValue(k, v[0]); tok != "" {
				return tok
			}
		}
	}
	return ""
}

// headerValue is the token in the value of header k: the whole value of
// DingTalk's header, the credentials of a Bearer Authorization.
func headerValue(k, v string) string {
	if strings.EqualFold(k, "Authorization") {
		tok, ok := cutPrefixFold(v, "Bearer ")
		if !ok {
			return ""
		}
		return strings.TrimSpace(tok)
	}
	return strings.TrimSpace(v)
}

// QueryValue finds one parameter without parsing the whole query (which
// allocates a map per request).
func QueryValue(q, name string) string {
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k != name {
			continue
		}
		return unescaped(v)
	}
	return ""
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

// Header returns the first value of the header name (in canonical form),
// also when a client set it through the header map in another case
// (req.Header["content-type"] = ..., as darabonba/tea clients do), which
// Header.Get misses.
func Header(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0]
		}
	}
	return ""
}
