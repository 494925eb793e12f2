package apps

import (
	"net/http"
	"net/url"
	"time"

	"github.com/quotaware/throttle/internal/apipath"
	"github.com/quotaware/throttle/internal/exchanges"
	"github.com/quotaware/throttle/internal/tokenform"
	"github.com/quotaware/throttle/providers"
)

// Provider names, the presets' profile names.
const (
	nameDingTalk = exchanges.DingTalk
	nameWeChat   = exchanges.WeChat
	nameWeCom    = exchanges.WeCom
	nameFeishu   = exchanges.Feishu
)

// grant is one token an exchange handed out, and whose it is.
type grant struct {
	token string
	app   App
	ttl   time.Duration
}

// exchangeFor returns the exchange a request is, or nil (package
// exchanges describes each), path being the request's path as sent
// (apipath.Sent); whether the request went to the provider at all is
// Observe's check (fromProvider).
func exchangeFor(method, path string) *exchanges.Kind { return exchanges.For(method, path) }

// Bounds of what an answer may state (a token's form is tokenform.Sane's).
const (
	// minTokenTTL is the shortest lifetime an answer may state (providers
	// state 7,200 s, WeChat's stable token at least 300 s; emulators scale
	// time down): a missing, zero or negative one is not an answer to trust.
	minTokenTTL = time.Second
)

// ids turns the Book's lookup into the one package exchanges takes.
func ids(lookup func(string) (App, bool)) exchanges.Lookup {
	return func(tok string) (string, bool) {
		a, ok := lookup(tok)
		return a.ID, ok
	}
}

// read returns the tokens an exchange's answer hands out and whose they
// are: the app (and org or tenant) the request names; none when the answer
// fails the provider's checks. lookup resolves a token the request itself
// carries (a suite's or an app's token that names the app of a tenant
// token).
func read(ex *exchanges.Kind, path string, q url.Values, reqBody, respBody []byte, lookup func(string) (App, bool)) []grant {
	a, ok := ex.ParseAnswer(respBody)
	if !ok {
		return nil
	}
	app, org := ex.Names(path, q, exchanges.ParseRequest(reqBody), ids(lookup))
	life, _ := a.Lifetime()
	var gs []grant
	for _, tok := range ex.Tokens(path, a) {
		o := org
		if tok.AppOnly {
			o = "" // a Feishu app_access_token is the app's, whatever tenant
		}
		gs = append(gs, one(ex.Provider, tok.Value, app, o, time.Duration(life)*time.Second)...)
	}
	return gs
}

// one returns a single grant when token and app are known and sane, and
// the lifetime stated is one a provider states.
func one(provider, token, app, org string, ttl time.Duration) []grant {
	if !tokenform.Sane(token) || app == "" || ttl < minTokenTTL || ttl > maxTTL {
		return nil
	}
	if checkIdentity(App{Provider: provider, ID: app, Org: org}) != nil {
		return nil
	}
	return []grant{{token: token, app: App{Provider: provider, ID: app, Org: org}, ttl: ttl}}
}

// maxNamesBody bounds the body Resolve peeks at: an exchange's request
// is a few hundred bytes, its naming members come first or close to it.
const maxNamesBody = 4 << 10

// exchangeApp returns the app (and org or tenant) the exchange ex names
// in req's query or body, and whether it names one. The body is peeked at
// (providers.PeekRequestBody) and replays whole for the caller. The Book
// resolves a token the request carries (a Feishu store app's app
// token); a nil Book resolves none.
func (b *Book) exchangeApp(req *http.Request, ex *exchanges.Kind) (App, bool) {
	ctx := req.Context()
	lookup := func(tok string) (App, bool) {
		if b == nil || tok == "" {
			return App{}, false
		}
		return b.Lookup(ctx, tok)
	}
	var body []byte
	if req.Method != http.MethodGet {
		body, _ = providers.PeekRequestBody(req, maxNamesBody)
	}
	id, org := ex.Names(apipath.Sent(req.URL), req.URL.Query(), exchanges.ParseRequest(body), ids(lookup))
	app := App{Provider: ex.Provider, ID: id, Org: org}
	if id == "" || checkIdentity(app) != nil {
		return App{}, false
	}
	return app, true
}
