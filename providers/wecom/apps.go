package wecom

import (
	"errors"
	"fmt"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/appset"
)

// UnknownCorp is the CorpID of the shared scope that requests of unknown
// companies are charged to when AppsConfig.Default is empty.
const UnknownCorp = "unknown"

// AppsConfig describes every company a service calls: its own (internal
// apps share their company's limits, so a company is one entry whatever
// its apps) and, for a third-party app, each company that authorised it.
type AppsConfig struct {
	// Shared holds what every company's calls share: Egress, Hosts, the
	// per-IP limits (IPPerMinute, IPPerHour, set by ThirdParty), Jitter,
	// DayGrace, Clock and TimeScale; those fields of the Corps entries are ignored.
	// Its company limits apply to the unknown companies' shared scope and
	// to companies learned from tokens but not listed.
	Shared Config
	// Corps are the companies listed in advance, each with its own limits.
	// A third-party app need not list the companies that authorise it:
	// each is learned from its get_corp_token exchange and limited with
	// Shared's company limits (WeCom documents the same per-company limits
	// for third-party calls; an assumption where it does not).
	Corps []Config
	// Default is the CorpID a request of an unknown company is charged
	// to; empty: the shared scope UnknownCorp with Shared's limits.
	Default string
	// Unlisted treats a learned company not in Corps as unknown.
	Unlisted bool
}

// Apps is the WeCom preset for a service that calls several companies:
// one profile that charges every request to its own company's limits,
// told by the App the Transport attaches to it (learned from the gettoken
// or third-party get_corp_token exchange, or given by throttle.ContextWithApp with
// the CorpID, or throttle.ContextWithTenant with the suite and the CorpID).
type Apps struct {
	shared Config
	set    *appset.Set
}

// errNilApps is Add's answer on a nil *Apps (a NewApps error ignored).
var errNilApps = errors.New("wecom: Add on a nil *Apps (NewApps failed?)")

// NewApps builds the preset for many companies, naming the entry and field
// of a config that cannot work.
func NewApps(c AppsConfig) (*Apps, error) {
	if len(c.Corps) == 0 && c.Default != "" {
		return nil, errors.New("wecom: AppsConfig.Default needs Corps")
	}
	a := &Apps{shared: c.Shared}
	a.shared.CorpID = UnknownCorp
	a.shared.setDefaults()
	if err := a.shared.validate(); err != nil {
		return nil, fmt.Errorf("wecom: AppsConfig.Shared: %w", err)
	}
	keys := make([]string, 0, len(c.Corps))
	profiles := make([]providers.Profile, 0, len(c.Corps))
	fallback := -1
	for i, cfg := range c.Corps {
		p, err := Profile(a.inherit(cfg))
		if err != nil {
			return nil, fmt.Errorf("wecom: AppsConfig.Corps[%d]: %w", i, err)
		}
		keys, profiles = append(keys, cfg.CorpID), append(profiles, p)
		if cfg.CorpID == c.Default {
			fallback = i
		}
	}
	var fb providers.Profile
	switch {
	case c.Default != "" && fallback < 0:
		return nil, fmt.Errorf("wecom: AppsConfig.Default %q is not one of Corps", c.Default)
	case fallback >= 0:
		fb = profiles[fallback]
	default:
		p, err := Profile(a.shared)
		if err != nil {
			return nil, fmt.Errorf("wecom: AppsConfig.Shared: %w", err)
		}
		fb = p
	}
	sc := appset.Config{Name: Name, Match: fb.Match, Fallback: fb, Key: corpOf}
	if !c.Unlisted {
		sc.Build = func(app apps.App) (providers.Profile, string, error) {
			cfg := a.shared
			cfg.CorpID = corpOf(app)
			p, err := Profile(cfg)
			return p, cfg.CorpID, err
		}
	}
	set, err := appset.New(sc, keys, profiles)
	if err != nil {
		return nil, err
	}
	a.set = set
	return a, nil
}

// corpOf is the company whose limits a request counts against: the
// authorising company of a third-party app's token, else the app's own.
func corpOf(app apps.App) string {
	if app.Org != "" {
		return app.Org
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

// Add adds or replaces a company while the service runs.
func (a *Apps) Add(cfg Config) error {
	if a == nil {
		return errNilApps
	}
	p, err := Profile(a.inherit(cfg))
	if err != nil {
		return err
	}
	a.set.Add(cfg.CorpID, p)
	return nil
}

// Profile returns the profile of every company, for throttle.WithProfiles.
func (a *Apps) Profile() providers.Profile {
	if a == nil {
		return providers.Profile{Name: Name} // Validate names the missing Match
	}
	return a.set.Profile()
}

func (a *Apps) inherit(cfg Config) Config {
	s := &a.shared
	cfg.Egress, cfg.Hosts, cfg.ThirdParty = s.Egress, s.Hosts, s.ThirdParty
	if cfg.EntityKey == "" {
		cfg.EntityKey = s.EntityKey
	}
	cfg.IPPerMinute, cfg.IPPerHour = s.IPPerMinute, s.IPPerHour
	cfg.Jitter, cfg.DayGrace, cfg.Clock, cfg.TimeScale = s.Jitter, s.DayGrace, s.Clock, s.TimeScale
	return cfg
}
