package tokenform

import (
	"net/http"
	"net/url"
	"strings"
)

// Replace returns a copy of req that carries tok where req carries old:
// the header x-acs-dingtalk-access-token, a Bearer Authorization (either
// in any case), and the query parameters access_token and
// suite_access_token, each only where its value is old. Everything else
// of the request is as it was, the query's other parameters byte for byte;
// req itself is not changed (a RoundTripper must not modify its request).
// The copy shares req's body.
func Replace(req *http.Request, old, tok string) *http.Request {
	out := req.Clone(req.Context())
	for k, v := range out.Header {
		if len(v) == 0 || !(strings.EqualFold(k, dingtalkHeader) || strings.EqualFold(k, "Authorization")) {
			continue
		}
		if headerValue(k, v[0]) != old {
			continue
		}
		if strings.EqualFold(k, "Authorization") {
			v[0] = v[0][:len("Bearer ")] + tok
		} else {
			v[0] = tok
		}
	}
	if out.URL != nil && out.URL.RawQuery != "" {
		out.URL.RawQuery = replaceQuery(out.URL.RawQuery, old, tok)
	}
	return out
}

// replaceQuery rewrites the values of access_token and suite_access_token
// that read old (unescaped as QueryValue does) to tok, escaped; every
// other byte of q stays.
func replaceQuery(q, old, tok string) string {
	var b strings.Builder
	for rest := q; ; {
		kv, next, more := strings.Cut(rest, "&")
		k, v, hasValue := strings.Cut(kv, "=")
		if hasValue && (k == "access_token" || k == "suite_access_token") && unescaped(v) == old {
			kv = k + "=" + url.QueryEscape(tok)
		}
		b.WriteString(kv)
		if !more {
			return b.String()
		}
		b.WriteByte('&')
		rest = next
	}
}

// unescaped is a query value as QueryValue reads it.
func unescaped(v string) string {
	if strings.ContainsAny(v, "%+") {
		if u, err := url.QueryUnescape(v); err == nil {
			return u
		}
	}
	return v
}
