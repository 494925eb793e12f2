package tokens

import (
	"github.com/quotaware/throttle/internal/exchanges"
	"github.com/quotaware/throttle/internal/tokenform"
)

// Provider names, as the presets name their profiles.
const (
	dingtalk = exchanges.DingTalk
	wechat   = exchanges.WeChat
	wecom    = exchanges.WeCom
	feishu   = exchanges.Feishu
)

// exchange is one kind of token call, as package exchanges describes it:
// how its request presents the credential, and how its answer states
// success, token and lifetime.
type exchange = exchanges.Kind

// exchangeFor returns the exchange a request is, or nil.
func exchangeFor(method, path string) *exchange { return exchanges.For(method, path) }

// Bounds of what is kept.
const (
	maxLifetime = 86400 // seconds: providers state 7,200
)

// check reads an exchange's answer as the provider states success and
// returns its token (the one the SDK sends afterwards, which healing looks
// for) and lifetime in seconds; ok is false for anything not to be kept: an
// error code (45009, 40013, 40125, a string code as DingTalk's new API
// fails with), no token, a token of odd form, no lifetime or more than one,
// a lifetime out of bounds.
func check(ex *exchange, path string, b []byte) (token string, lifetime int64, ok bool) {
	a, ok := ex.ParseAnswer(b)
	if !ok {
		return "", 0, false
	}
	lifetime, n := a.Lifetime()
	toks := ex.Tokens(path, a)
	if n != 1 || lifetime < 1 || lifetime > maxLifetime || len(toks) == 0 || !tokenform.Sane(toks[0].Value) {
		return "", 0, false
	}
	return toks[0].Value, lifetime, true
}
