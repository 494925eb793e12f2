package feishu

import (
	"errors"
	"fmt"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/appset"
)

// UnknownApp is the app_id of the shared scope that requests of unknown
// apps are charged to when AppsConfig.Default is empty.
const UnknownApp = "unknown"

// AppsConfig describes every Feishu / Lark app a service calls as.
type AppsConfig struct {
	// Shared holds what every app shares: Hosts, Jitter and Clock (those
	// fields of the Apps entries are ignored). The rest of it (levels, API
	// map) is the config of the unknown apps' shared scope and of apps
	// learned from tokens but not listed.
	Shared Config
	// Apps are the apps, each with its own levels and edition. A store
	// app serving many tenants needs one entry: its limits apply per app
	// per tenant (as Feishu documents), each tenant learned from its
	// tenant_access_token exchange.
	Apps []Config
	// Default is the app_id a request of an unknown app is charged to;
	// empty: the shared scope UnknownApp with Shared's levels.
	Default string
	// Unlisted treats a learned app not in Apps as unknown.
	Unlisted bool
}

// Apps is the Feishu preset for a service that calls as several apps, or
// as a store app installed by many tenants: one profile that charges every
// request to its own app (and tenant), told by the App the Transport
// attaches to it.
type Apps struct {
	shared Config
	byID   map[string]Config // the listed configs, for their tenants
	set    *appset.Set
}

// errNilApps is Add's answer on a nil *Apps (a NewApps error ignored).
var errNilApps = errors.New("feishu: Add on a nil *Apps (NewApps failed?)")

// NewApps builds the preset for many apps, naming the entry and field of a
// config that cannot work.
func NewApps(c AppsConfig) (*Apps, error) {
	if len(c.Apps) == 0 {
		return nil, errors.New("feishu: AppsConfig.Apps must list at least one app")
	}
	a := &Apps{shared: c.Shared, byID: make(map[string]Config, len(c.Apps))}
	a.shared.setDefaults()
	keys := make([]string, 0, len(c.Apps))
	profiles := make([]providers.Profile, 0, len(c.Apps))
	fallback := -1
	for i, cfg := range c.Apps {
		cfg = a.inherit(cfg)
		p, err := Profile(cfg)
		if err != nil {
			return nil, fmt.Errorf("feishu: AppsConfig.Apps[%d]: %w", i, err)
		}
		a.byID[cfg.AppID] = cfg
		keys, profiles = append(keys, cfg.AppID), append(profiles, p)
		if cfg.AppID == c.Default {
			fallback = i
		}
	}
	var fb providers.Profile
	switch {
	case c.Default != "" && fallback < 0:
		return nil, fmt.Errorf("feishu: AppsConfig.Default %q is not one of Apps", c.Default)
	case fallback >= 0:
		fb = profiles[fallback]
	default:
		unknown := a.shared
		unknown.AppID = UnknownApp
		p, err := Profile(unknown)
		if err != nil {
			return nil, fmt.Errorf("feishu: AppsConfig.Shared: %w", err)
		}
		fb = p
	}
	unlisted := c.Unlisted
	listed := a.byID // never written after this
	sc := appset.Config{Name: Name, Match: fb.Match, Fallback: fb, Key: appKey}
	sc.Build = func(app apps.App) (providers.Profile, string, error) {
		cfg, ok := listed[app.ID]
		if !ok {
			if unlisted {
				return providers.Profile{}, "", errors.New("unlisted")
			}
			cfg = a.shared
		}
		cfg.AppID = appKey(app)
		p, err := Profile(cfg)
		return p, cfg.AppID, err
	}
	set, err := appset.New(sc, keys, profiles)
	if err != nil {
		return nil, err
	}
	a.set = set
	return a, nil
}

// appKey is the unit Feishu limits: the app, in one tenant for a store app.
func appKey(app apps.App) string {
	if app.Org != "" {
		return app.ID + "@" + app.Org
	}
	return app.ID
}

// MustApps is NewApps that panics on an invalid config.
func MustApps(c AppsConfig) *Apps {
	a, err := NewApps(c)
	if err != nil {
		panic(err)
	}
	return a
}

// Add adds or replaces an internal app while the service runs. (A store
// app's new tenants need nothing: each is learned from its token.)
func (a *Apps) Add(cfg Config) error {
	if a == nil {
		return errNilApps
	}
	p, err := Profile(a.inherit(cfg))
	if err != nil {
		return err
	}
	a.set.Add(cfg.AppID, p)
	return nil
}

// Profile returns the profile of every app, for throttle.WithProfiles.
func (a *Apps) Profile() providers.Profile {
	if a == nil {
		return providers.Profile{Name: Name} // Validate names the missing Match
	}
	return a.set.Profile()
}

func (a *Apps) inherit(cfg Config) Config {
	cfg.Hosts, cfg.Jitter, cfg.Clock = a.shared.Hosts, a.shared.Jitter, a.shared.Clock
	if cfg.EntityKey == "" {
		cfg.EntityKey = a.shared.EntityKey
	}
	return cfg
}
