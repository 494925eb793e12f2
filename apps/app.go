package apps

import "context"

// App names the app a request is made as and, for a third-party (ISV) app
// serving many customers, the customer organisation (tenant) it is made for.
// Presets read it with FromContext to pick the app's rules and scopes; the
// Transport attaches it to a request's context before Route, either learned
// from the request's access token (a Book) or given by the caller
// (throttle.ContextWithApp).
//
// IDs are what the provider calls them: a DingTalk AppKey or SuiteKey and
// CorpID, a WeChat AppID, a WeCom CorpID (and the suite of a third-party
// app), a Feishu app_id and tenant_key. They are identifiers, not secrets.
type App struct {
	// Provider is the profile name the identity was learned for
	// ("dingtalk", "wechat", ...); "" when the caller named the app without
	// saying which provider, which every preset accepts (a preset uses an
	// identity with its own name or none).
	Provider string
	// ID is the app (for an ISV: its suite).
	ID string
	// Org is the customer organisation or tenant; "" for an internal app.
	Org string
	// Learned is true when the identity came from the token the request
	// carries, false when the caller gave it.
	Learned bool
}

type appKey struct{}

// NewContext returns a context that makes requests as app. An App given by
// the caller wins over one learned from a token. Callers use
// throttle.ContextWithApp or throttle.ContextWithTenant; NewContext is for tests and for
// presets.
func NewContext(ctx context.Context, app App) context.Context {
	return context.WithValue(ctx, appKey{}, app)
}

// FromContext returns the identity attached to ctx, if any.
func FromContext(ctx context.Context) (App, bool) {
	a, ok := ctx.Value(appKey{}).(App)
	return a, ok && a.ID != ""
}

type tokenAppKey struct{}

// withTokenApp records, beside an app the caller named, the app the
// request's token is known to belong to.
func withTokenApp(ctx context.Context, app App) context.Context {
	return context.WithValue(ctx, tokenAppKey{}, app)
}

// TokenApp returns the app the request's token belongs to, as this replica
// knows it, when the caller named an app of no provider (ContextWithApp):
// a preset that neither lists nor learned the caller's app charges the
// request to the token's, since the tag may be meant for another
// provider's app.
func TokenApp(ctx context.Context) (App, bool) {
	a, ok := ctx.Value(tokenAppKey{}).(App)
	return a, ok && a.ID != ""
}
