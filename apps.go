package throttle

import (
	"context"
	"net/http"

	"github.com/quotaware/throttle/apps"
)

// WithApps makes the Transport learn which app (and customer organisation)
// each access token belongs to from the token exchanges it carries, and tag
// every request with it before the preset routes it, so that one Transport
// keeps each of several apps within its own limits (see package apps). Give
// every replica a Book made with apps.WithRedis and one shared key, so that
// a token one replica fetched is known to all. The Book records its own
// metrics (throttle.apps.unknown, throttle.apps.learned): give it
// apps.WithMeterProvider with the provider given to WithMeterProvider.
func WithApps(b *apps.Book) Option {
	return optionFunc(func(c *config) {
		if b == nil {
			c.fail("WithApps: book must not be nil")
		}
		c.apps = b
	})
}

// ContextWithApp returns a context whose requests are made as app (a DingTalk
// AppKey or SuiteKey, a WeChat AppID, a WeCom CorpID, a Feishu app_id),
// whatever token they carry: for callers that hold several clients or know
// better than what the Transport learned.
func ContextWithApp(ctx context.Context, app string) context.Context {
	return apps.NewContext(ctx, apps.App{ID: app})
}

// ContextWithTenant is ContextWithApp for a third-party (ISV) app calling into one
// customer organisation or tenant (a DingTalk or WeCom CorpID, a Feishu
// tenant_key).
func ContextWithTenant(ctx context.Context, app, org string) context.Context {
	return apps.NewContext(ctx, apps.App{ID: app, Org: org})
}

// resolveApp tags req with its app for profile p; see WithApps.
// A token exchange is charged to the app it names (its query or body), with
// or without a Book: it carries no token of its own, and would otherwise
// land in the preset's unknown scope, where every account's exchanges share
// one quota.
func (t *Transport) resolveApp(req *http.Request, p *profile) *http.Request {
	if _, tagged := apps.FromContext(req.Context()); !tagged {
		if app, ok := t.apps.ExchangeApp(req, p.Name); ok {
			req = req.WithContext(apps.NewContext(req.Context(), app))
		}
	}
	if t.apps == nil {
		return req
	}
	return t.apps.Resolve(req, p.Name)
}
