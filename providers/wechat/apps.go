package wechat

import (
	"errors"
	"fmt"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/appset"
)

// UnknownApp is the AppID of the shared scope that requests of unknown
// accounts are charged to when AppsConfig.Default is empty.
const UnknownApp = "unknown"

// AppsConfig describes every account (AppID) a service calls as.
type AppsConfig struct {
	// Shared holds what every account shares: Hosts, Jitter, TimeScale, DayGrace and
	// Clock (those fields of the Apps entries are ignored), and the quotas
	// of the unknown accounts' shared scope: its Daily and PerMinute
	// (default: a new account's, the lowest WeChat grants).
	Shared Config
	// Apps are the accounts, each with its own quotas.
	Apps []Config
	// Default is the AppID a request of an unknown account is charged to;
	// empty: the shared scope UnknownApp with Shared's quotas.
	Default string
	// Unlisted treats a learned AppID not in Apps as unknown; false (the
	// default) gives it Shared's quotas under its own AppID.
	Unlisted bool
}

// Apps is the WeChat preset for a service that calls as several accounts:
// one profile that charges every request to the quotas of its own AppID,
// told by the App the Transport attaches to it (throttle.WithApps learns it
// from the token; throttle.ContextWithApp gives it).
type Apps struct {
	shared Config
	set    *appset.Set
}

// errNilApps is Add's answer on a nil *Apps (a NewApps error ignored).
var errNilApps = errors.New("wechat: Add on a nil *Apps (NewApps failed?)")

// NewApps builds the preset for many accounts, naming the entry and field
// of a config that cannot work.
func NewApps(c AppsConfig) (*Apps, error) {
	if len(c.Apps) == 0 {
		return nil, errors.New("wechat: AppsConfig.Apps must list at least one account")
	}
	a := &Apps{shared: c.Shared}
	a.shared.setDefaults()
	keys := make([]string, 0, len(c.Apps))
	profiles := make([]providers.Profile, 0, len(c.Apps))
	var fallback *providers.Profile
	for i, cfg := range c.Apps {
		p, err := Profile(a.inherit(cfg))
		if err != nil {
			return nil, fmt.Errorf("wechat: AppsConfig.Apps[%d]: %w", i, err)
		}
		keys, profiles = append(keys, cfg.AppID), append(profiles, p)
		if cfg.AppID == c.Default {
			fallback = &profiles[len(profiles)-1]
		}
	}
	if c.Default != "" && fallback == nil {
		return nil, fmt.Errorf("wechat: AppsConfig.Default %q is not one of Apps", c.Default)
	}
	if fallback == nil {
		unknown := a.shared
		unknown.AppID = UnknownApp
		p, err := Profile(unknown)
		if err != nil {
			return nil, fmt.Errorf("wechat: AppsConfig.Shared: %w", err)
		}
		fallback = &p
	}
	sc := appset.Config{Name: Name, Match: fallback.Match, Fallback: *fallback}
	if !c.Unlisted {
		sc.Build = func(app apps.App) (providers.Profile, string, error) {
			cfg := a.shared
			cfg.AppID = app.ID
			p, err := Profile(cfg)
			return p, app.ID, err
		}
	}
	set, err := appset.New(sc, keys, profiles)
	if err != nil {
		return nil, err
	}
	a.set = set
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

// Add adds or replaces an account while the service runs.
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

// Profile returns the profile of every account, for throttle.WithProfiles.
func (a *Apps) Profile() providers.Profile {
	if a == nil {
		return providers.Profile{Name: Name} // Validate names the missing Match
	}
	return a.set.Profile()
}

func (a *Apps) inherit(cfg Config) Config {
	cfg.Hosts, cfg.Jitter, cfg.DayGrace, cfg.Clock = a.shared.Hosts, a.shared.Jitter, a.shared.DayGrace, a.shared.Clock
	cfg.TimeScale = a.shared.TimeScale
	return cfg
}
