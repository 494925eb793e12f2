package throttle

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/limiter"
)

// WithApps makes the Transport learn which app (and customer organisation)
// each access token belongs to from the token exchanges it carries, and tag
// every request with it before the preset routes it, so that one Transport
// keeps each of several apps within its own limits (see package apps).
//
// The Transport builds the Book from cfg, filling its zero fields with its
// own: the Redis client and key prefix of WithRedis (or of a
// *limiter.Shared given to WithLimiter) when cfg.Redis is nil (a Book on a
// Redis of its own keeps its own Prefix, default "throttle"), the meter
// provider of WithMeterProvider, the logger of WithLogger. On Redis, give
// every replica the same cfg.Key, so that a token one replica fetched is
// known to all: it is the one setting with no default. Transport.Apps returns
// the Book (its Stats, KeyCheck); Close closes it.
func WithApps(cfg apps.Config) Option {
	return optionFunc(func(c *config) { c.apps = &cfg })
}

// Apps returns the Book of WithApps, or nil without it. The Book lives as
// long as the Transport: once the Transport is closed, or collected after it
// was dropped, the Book no longer hears what other replicas learn.
func (t *Transport) Apps() *apps.Book { return t.apps }

// buildApps builds the Book of WithApps on what the Transport already has.
func (t *Transport) buildApps(c *config) error {
	if c.apps == nil {
		return nil
	}
	cfg := *c.apps
	if s, ok := c.limiter.(*limiter.Shared); ok && cfg.Redis == nil {
		cfg.Redis = s.Client()
		if cfg.Prefix == "" {
			cfg.Prefix = s.Config().Prefix
		}
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = t.tel.meterProvider
		if t.tel.disabled {
			cfg.MeterProvider = noop.NewMeterProvider()
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = c.logger
	}
	b, err := apps.New(cfg)
	if err != nil {
		return fmt.Errorf("throttle: WithApps: %w", err)
	}
	t.apps = b
	return nil
}

// ContextWithApp returns a context whose requests are made as app (a DingTalk
// AppKey or SuiteKey, a WeChat AppID, a WeCom CorpID, a Feishu app_id),
// whatever token they carry: for callers that hold several clients or know
// better than what the Transport learned. The tag names no provider, so
// every preset reads it: one that does not list app charges the request to
// the app its token is known (WithApps, in this replica's memory) to
// belong to, so a context reused for another provider's call does not lift
// that call's limit; with no such token, to a profile of app's own (or the
// default app or unknown scope, with Unlisted).
func ContextWithApp(ctx context.Context, app string) context.Context {
	return apps.NewContext(ctx, apps.App{ID: app})
}

// ContextWithTenant is ContextWithApp for a third-party (ISV) app calling into one
// customer organisation or tenant (a DingTalk or WeCom CorpID, a Feishu
// tenant_key).
func ContextWithTenant(ctx context.Context, app, org string) context.Context {
	return apps.NewContext(ctx, apps.App{ID: app, Org: org})
}

// resolveApp tags req with its app for profile p (see WithApps and
// apps.Book.Resolve). A token exchange is charged to the app it names, with
// or without a Book.
func (t *Transport) resolveApp(req *http.Request, p *profile) *http.Request {
	return t.apps.Resolve(req, p.Name)
}
