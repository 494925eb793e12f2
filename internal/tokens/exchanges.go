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

// exchangeFor returns the exchange a request is, or nil; path is the
// request's path as sent (apipath.Sent).
func exchangeFor(method, path string) *exchange { return exchanges.For(method, path) }

// Bounds of what is kept.
const (
	maxLifetime = 86400 // seconds: providers state 7,200
)

// check reads an exchange's answer as the provider states success and
// returns its tokens and lifetime in seconds; ok is false for anything not
// to be kept: an error code (45009, 40013, 40125, a string code as
// DingTalk's new API fails with), no token, a first token of odd form, no
// lifetime or more than one, a lifetime out of bounds. The first token is
// the one the SDK sends afterwards, whose hash heads the value kept; the
// others are handed out with it (Feishu's app_access_token/internal: the
// tenant's token, then the app's), and each is watched, so that a refusal
// of any of them heals the answer that handed it out.
func check(ex *exchange, path string, b []byte) (toks []exchanges.Token, lifetime int64, ok bool) {
	a, ok := ex.ParseAnswer(b)
	if !ok {
		return nil, 0, false
	}
	lifetime, n := a.Lifetime()
	toks = ex.Tokens(path, a)
	if n != 1 || lifetime < 1 || lifetime > maxLifetime || len(toks) == 0 || !tokenform.Sane(toks[0].Value) {
		return nil, 0, false
	}
	return toks, lifetime, true
}

// sameKind is the token of toks of the kind appOnly names (a Feishu
// app_access_token, or the token the exchange is named for), "" for none:
// a refused app token is replaced by an app token, never by the tenant's.
func sameKind(toks []exchanges.Token, appOnly bool) string {
	for _, t := range toks {
		if t.AppOnly == appOnly {
			return t.Value
		}
	}
	return ""
}
