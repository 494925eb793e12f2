package dingtalk

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
)

// UnknownApp is the app key of the conservative shared scope that requests
// of unknown apps are charged to when AppsConfig.Default is empty.
const UnknownApp = "unknown"

// AppsConfig describes every DingTalk app and ISV suite a service calls as.
type AppsConfig struct {
	// Shared holds what the deployment's apps share: Hosts, Egress,
	// EgressLimit, EgressPeriod, EgressBurst, Jitter, IPBanPenalty,
	// RobotPerMinute, RobotPenalty, PeekLimit and Clock. These fields of the
	// Apps entries are ignored; every other field is per app. Shared's
	// AppKey is ignored too.
	Shared Config
	// Apps are the apps (Edition, PerAPIRate ... per app) and ISV suites
	// (ISV: true, AppKey the SuiteKey; their customer orgs need no entry:
	// each request's org is learned from its token, see package apps).
	Apps []Config
	// Default is the AppKey that a request is charged to when its app is
	// not known (its token was not learned and the caller did not name the
	// app). Empty: such requests share one conservative scope, app
	// UnknownApp at the lowest per-API rate of Apps, so that they can never
	// exceed any app's limit, but may use less of it.
	Default string
	// Unlisted says what to do with a request whose learned app is not in
	// Apps: false (the default) limits it as a new standard-edition
	// internal app built from Shared; true treats it as unknown.
	Unlisted bool
}

// Apps is the DingTalk preset for a service that calls as several apps, or
// as a third-party suite installed in many customer orgs: one profile that
// charges every request to its own app (and org), told by the identity the
// Transport attaches to the request (throttle.WithApps learns it from the
// token, throttle.ContextWithApp gives it). Add apps while it runs with Add; new
// customer orgs need nothing. Safe for concurrent use.
type Apps struct {
	shared   Config
	hosts    func(*http.Request) bool
	byKey    atomic.Pointer[map[string]*preset]
	mu       sync.Mutex // serialises Add
	fallback *preset    // Default's preset, or the shared unknown scope
	unlisted bool
}

// errNilApps is Add's answer on a nil *Apps (a NewApps error ignored).
var errNilApps = errors.New("dingtalk: Add on a nil *Apps (NewApps failed?)")

// NewApps builds the preset for many apps. It fails, naming the app and
// field, when a config cannot describe a working app.
func NewApps(c AppsConfig) (*Apps, error) {
	if len(c.Apps) == 0 {
		return nil, errors.New("dingtalk: AppsConfig.Apps must list at least one app")
	}
	shared := c.Shared
	shared.AppKey = UnknownApp
	shared, err := shared.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("dingtalk: AppsConfig.Shared: %w", err)
	}
	a := &Apps{shared: shared, hosts: providers.MatchHosts(shared.Hosts...), unlisted: c.Unlisted}
	empty := map[string]*preset{}
	a.byKey.Store(&empty)
	lowest := 0
	for i, cfg := range c.Apps {
		p, err := a.add(cfg)
		if err != nil {
			return nil, fmt.Errorf("dingtalk: AppsConfig.Apps[%d]: %w", i, err)
		}
		if r := p.cfg.apiRate(); lowest == 0 || r < lowest {
			lowest = r
		}
	}
	if c.Default != "" {
		if a.fallback = a.presets()[c.Default]; a.fallback == nil {
			return nil, fmt.Errorf("dingtalk: AppsConfig.Default %q is not one of Apps", c.Default)
		}
		if f := a.fallback.cfg; f.ISV && f.CorpID == "" {
			// Requests of unknown apps name no customer org (the token
			// calls among them): they could not be routed.
			return nil, fmt.Errorf("dingtalk: AppsConfig.Default %q is an ISV suite without a CorpID", c.Default)
		}
		return a, nil
	}
	unknown := a.inherit(Config{AppKey: UnknownApp, PerAPIRate: lowest, MonthlyQuota: -1})
	if a.fallback, err = a.build(unknown); err != nil {
		return nil, fmt.Errorf("dingtalk: the unknown apps' scope: %w", err)
	}
	return a, nil
}

// MustApps is NewApps that panics on an invalid config.
func MustApps(c AppsConfig) *Apps {
	a, err := NewApps(c)
	if err != nil {
		panic(err)
	}
	return a
}

// Add adds or replaces an app while the service runs; requests of that app
// use its rules from then on.
func (a *Apps) Add(cfg Config) error {
	if a == nil {
		return errNilApps
	}
	_, err := a.add(cfg)
	return err
}

func (a *Apps) add(cfg Config) (*preset, error) {
	p, err := a.build(a.inherit(cfg))
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := *a.byKey.Load()
	next := make(map[string]*preset, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[p.cfg.AppKey] = p
	a.byKey.Store(&next)
	return p, nil
}

// inherit copies the deployment's shared fields into one app's config.
func (a *Apps) inherit(cfg Config) Config {
	s := &a.shared
	cfg.Hosts, cfg.Egress, cfg.EgressLimit, cfg.EgressPeriod, cfg.EgressBurst = s.Hosts, s.Egress, s.EgressLimit, s.EgressPeriod, s.EgressBurst
	cfg.Jitter, cfg.IPBanPenalty, cfg.PeekLimit, cfg.Clock = s.Jitter, s.IPBanPenalty, s.PeekLimit, s.Clock
	cfg.RobotPerMinute, cfg.RobotPenalty, cfg.EntityKey = s.RobotPerMinute, s.RobotPenalty, s.EntityKey
	if cfg.Jitter == 0 {
		cfg.Jitter = -1 // Shared chose none: keep it none
	}
	if cfg.ISV {
		own := cfg.OrgFromRequest
		cfg.OrgFromRequest = func(req *http.Request) string {
			if id, ok := apps.FromContext(req.Context()); ok && id.Org != "" {
				return id.Org
			}
			if own != nil {
				return own(req)
			}
			return ""
		}
	}
	return cfg
}

func (a *Apps) build(cfg Config) (*preset, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return newPreset(c)
}

func (a *Apps) presets() map[string]*preset { return *a.byKey.Load() }

// pick returns the preset of the request's app.
func (a *Apps) pick(req *http.Request) *preset {
	id, ok := apps.FromContext(req.Context())
	if !ok || !id.For(Name) {
		return a.fallback
	}
	if p := a.presets()[id.ID]; p != nil {
		return p
	}
	if a.unlisted || !validName(id.ID) {
		return a.fallback
	}
	// A learned app nobody listed: limit it as a standard internal app.
	p, err := a.add(Config{AppKey: id.ID})
	if err != nil {
		return a.fallback
	}
	return p
}

// Profile returns the profile of every app, for throttle.WithProfiles.
func (a *Apps) Profile() providers.Profile {
	if a == nil {
		return providers.Profile{Name: Name} // Validate names the missing Match
	}
	return providers.Profile{
		Name:  Name,
		Match: a.hosts,
		Route: func(req *http.Request) (providers.Route, error) {
			return a.pick(req).route(req)
		},
		Classify: func(req *http.Request, resp *http.Response, r *providers.Route) providers.Verdict {
			return a.pick(req).classify(req, resp, r)
		},
		DefaultPenalty: a.shared.DefaultPenalty,
	}
}
