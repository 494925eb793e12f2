package throttle

import (
	"net/url"
	"reflect"
	"strings"
)

// redactedValue replaces a credential's value.
const redactedValue = "REDACTED"

// RedactError returns err for logging, with the value of every credential
// in a URL's query (access_token, corpsecret, appsecret, sign, a WeCom
// robot's key, a DingTalk session webhook's session, ...), the token in the
// path of a Feishu or Lark bot webhook (/open-apis/bot/v2/hook/<token>) and
// every URL password replaced by REDACTED in its text, and in the text of
// every error its chain holds: a reporter that walks the chain with
// errors.Unwrap (and records each error's text, as error trackers do) reads
// no credential either. errors.Is matches what err matches; errors.As finds
// the types err holds, a *url.Error as a copy with its URL redacted.
//
// Use it on every error of an http.Client before logging it: net/http wraps
// a transport's error in *url.Error with the whole URL, so a refused,
// penalised or failed call to an API authenticated by its query
// ("?access_token=...") carries the token in its text. err itself is left
// as it is. An error whose chain holds no credential is returned as it is.
func RedactError(err error) error {
	if err == nil || !needsRedaction(err, 0) {
		return err
	}
	clean := redactText(errText(err))
	if _, many := err.(interface{ Unwrap() []error }); many {
		return &redactedErrors{redactedError{err: err, text: clean}}
	}
	return &redactedError{err: err, text: clean}
}

// needsRedaction reports whether the text of err or of any error in its
// chain holds a credential, or an error of the chain has an As of its own.
// A chain deeper than maxChain (one that loops) is taken to.
func needsRedaction(err error, depth int) bool {
	if err == nil {
		return false
	}
	if depth > maxChain {
		return true
	}
	if text := errText(err); redactText(text) != text {
		return true
	}
	if _, ok := err.(interface{ As(any) bool }); ok {
		return true // it may hand over errors no Unwrap shows (a multierror)
	}
	next, many := unwrap(err)
	if next != nil {
		return needsRedaction(next, depth+1)
	}
	for _, e := range many {
		if needsRedaction(e, depth+1) {
			return true
		}
	}
	return false
}

// unwrap returns what err wraps, one error or several, or nothing where
// Unwrap panics (a nil pointer, such as a nil *url.Error wrapped with %w).
func unwrap(err error) (next error, many []error) {
	defer func() {
		if recover() != nil {
			next, many = nil, nil
		}
	}()
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return u.Unwrap(), nil
	case interface{ Unwrap() []error }:
		return nil, u.Unwrap()
	}
	return nil, nil
}

// maxChain bounds how deep needsRedaction walks a chain.
const maxChain = 100

// errText is err's text, or "" where Error panics (a nil pointer wrapped
// with %w, which fmt itself prints as <nil>).
func errText(err error) (text string) {
	defer func() {
		if recover() != nil {
			text = ""
		}
	}()
	return err.Error()
}

// redactURLError is a copy of ue with its URL and its error redacted.
func redactURLError(ue *url.Error) *url.Error {
	return &url.Error{Op: ue.Op, URL: redactText(ue.URL), Err: RedactError(ue.Err)}
}

// RedactURL returns u as a string for logging, with its password, the
// value of every credential in its query and a bot webhook's path token
// replaced by REDACTED.
func RedactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	return redactText(u.Redacted())
}

// redactedError stands for one error of a chain, err, with a clean text;
// the errors it wraps are redacted in turn as they are unwrapped.
type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }

// Unwrap returns the next error of err's chain, redacted.
func (e *redactedError) Unwrap() error {
	next, _ := unwrap(e.err)
	return RedactError(next)
}

// Is matches what err itself matches (errors.Is goes on down the chain).
func (e *redactedError) Is(target error) bool {
	if t := reflect.TypeOf(target); t != nil && t.Comparable() && e.err == target {
		return true
	}
	x, ok := e.err.(interface{ Is(error) bool })
	return ok && x.Is(target)
}

// As finds err itself when it is of target's type, a *url.Error as a copy
// with its URL redacted (also for an interface it implements, such as
// net.Error). An error of another type is found as it is: its own fields
// are the caller's to log.
func (e *redactedError) As(target any) bool {
	found := e.err
	if ue, ok := e.err.(*url.Error); ok && ue != nil {
		found = redactURLError(ue)
	}
	v := reflect.ValueOf(target)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	if reflect.TypeOf(found).AssignableTo(v.Type().Elem()) {
		v.Elem().Set(reflect.ValueOf(found))
		return true
	}
	// err's own As (a multierror's) may hand over a *url.Error of the
	// original chain: it is redacted too.
	x, ok := e.err.(interface{ As(any) bool })
	if !ok || !x.As(target) {
		return false
	}
	if ue, ok := v.Elem().Interface().(*url.Error); ok && ue != nil {
		v.Elem().Set(reflect.ValueOf(redactURLError(ue)))
	}
	return true
}

// redactedErrors is a redactedError of an error that wraps several
// (errors.Join).
type redactedErrors struct{ redactedError }

// Unwrap returns the errors err wraps, each redacted.
func (e *redactedErrors) Unwrap() []error {
	_, errs := unwrap(e.err)
	out := make([]error, len(errs))
	for i, x := range errs {
		out[i] = RedactError(x)
	}
	return out
}

// redactText replaces the value of each credential parameter ("?name=" or
// "&name=") and the password of each "scheme://user:password@" in s.
func redactText(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '?', '&':
			eq := strings.IndexByte(s[i+1:], '=')
			if eq < 0 {
				continue
			}
			name := s[i+1 : i+1+eq]
			if strings.ContainsAny(name, "?&/ \"'") || !isCredential(name) {
				continue
			}
			start := i + 1 + eq + 1
			end := start
			for end < len(s) && !endsValue(s[end]) {
				end++
			}
			if end == start || s[start:end] == redactedValue {
				continue
			}
			b.WriteString(s[last:start])
			b.WriteString(redactedValue)
			last, i = end, end-1
		case '/':
			// A robot webhook whose token is a path segment: Feishu and
			// Lark custom bots, "/open-apis/bot/v2/hook/<token>".
			start := hookToken(s, i)
			if start < 0 {
				continue
			}
			end := start
			for end < len(s) && s[end] != '/' && s[end] != '?' && !endsValue(s[end]) {
				end++
			}
			if end == start || s[start:end] == redactedValue {
				continue
			}
			b.WriteString(s[last:start])
			b.WriteString(redactedValue)
			last, i = end, end-1
		case '@':
			// "scheme://user:password@host": the password, if any.
			slash := strings.LastIndex(s[last:i], "//")
			if slash < 0 {
				continue
			}
			userinfo := s[last+slash+2 : i]
			colon := strings.IndexByte(userinfo, ':')
			// Userinfo holding a redaction already (its password, or a
			// parameter's value the "//" before it was not seen past) is
			// left as it is, so that redacting twice changes nothing.
			if colon < 0 || strings.ContainsAny(userinfo, "/ ?#@") || strings.Contains(userinfo, redactedValue) {
				continue
			}
			start := last + slash + 2 + colon + 1
			b.WriteString(s[last:start])
			b.WriteString(redactedValue)
			last = i
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// hookPaths end the paths whose next segment is a robot's token (Feishu
// and Lark custom bots; the old form without v2 too).
var hookPaths = []string{"/bot/v2/hook/", "/bot/hook/"}

// hookToken returns where a robot token starts when the '/' at s[i] ends
// one of hookPaths, or -1.
func hookToken(s string, i int) int {
	for _, p := range hookPaths {
		if i+1 >= len(p) && strings.EqualFold(s[i+1-len(p):i+1], p) {
			return i + 1
		}
	}
	return -1
}

// endsValue reports a byte that ends a query value in an error's text.
func endsValue(c byte) bool {
	switch c {
	case '&', '#', ' ', '"', '\'', '>', ')', ';', ',', '\n', '\r', '\t':
		return true
	}
	return false
}

// isCredential reports a query parameter that carries a secret: the
// tokens, secrets, tickets and signatures of the providers' APIs
// (access_token, suite_access_token, corpsecret, appsecret, suite_ticket,
// sign, a group robot's key, a DingTalk session webhook's session, an OAuth
// code and the providers' other one-time codes: WeChat's js_code, WeCom's
// permanent_code, pre_auth_code and auth_code, DingTalk's tmp_auth_code)
// and the common names of others.
func isCredential(name string) bool {
	n := strings.ToLower(name)
	switch {
	case strings.HasSuffix(n, "token"), strings.HasSuffix(n, "secret"), strings.HasSuffix(n, "ticket"),
		strings.HasSuffix(n, "password"), strings.HasSuffix(n, "signature"), strings.HasSuffix(n, "_code"),
		strings.HasSuffix(n, "authcode"):
		return true
	}
	switch n {
	case "sign", "key", "code", "session", "api_key", "apikey", "auth", "authorization", "credential", "credentials":
		return true
	}
	return false
}
