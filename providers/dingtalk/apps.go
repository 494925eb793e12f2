package dingtalk

import (
	"errors"
	"net/http"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/appset"
)

// unknownApp is the app key of the conservative shared scope that requests
// of unknown apps are charged to when Config.Default is empty.
const unknownApp = "unknown"

// Preset is the DingTalk preset: one profile that charges every request to
// its own app (and, for an ISV suite, customer org), told by the identity
// the Transport attaches to the request (throttle.WithApps learns it from
// the token, throttle.ContextWithApp gives it). Build it with New or
// MustNew, give its Profile to throttle.WithProfiles, and Add apps while it
// runs; new customer orgs need nothing. Safe for concurrent use.
type Preset struct {
	cfg      Config
	set      *appset.Set
	rebuilds *appset.Rebuilds[App, *Preset] // for a new latency allowance
}

// New builds the preset of a Config listing one app or many. It fails,
// naming the app and field, when the config cannot describe working apps.
func New(c Config) (*Preset, error) {
	if _, err := c.build(App{AppKey: unknownApp}); err != nil {
		return nil, err // a deployment-wide field, whatever the app
	}
	p := &Preset{cfg: c, rebuilds: &appset.Rebuilds[App, *Preset]{ID: func(a App) string { return a.AppKey }}}
	spec := appset.Spec[App]{
		Name: Name,
		Apps: c.Apps,
		ID:   func(a App) string { return a.AppKey },
		Build: func(a App) (providers.Profile, error) {
			pr, err := c.build(a)
			if err != nil {
				return providers.Profile{}, err
			}
			return pr.profile(), nil
		},
		Default: c.Default,
		CheckDefault: func(a App) error {
			if a.ISV && a.CorpID == "" {
				// Requests of unknown apps name no customer org (the token
				// calls among them): they could not be routed.
				return errors.New("is an ISV suite without a CorpID")
			}
			return nil
		},
		Unknown: func(listed []App) (providers.Profile, error) {
			lowest := 0
			for _, a := range listed {
				s, _ := c.merge(a).withDefaults() // built above: valid
				if r := s.apiRate(); lowest == 0 || r < lowest {
					lowest = r
				}
			}
			pr, err := c.build(App{AppKey: unknownApp, PerAPIRate: lowest, NoMonthlyQuota: true})
			if err != nil {
				return providers.Profile{}, err
			}
			return pr.profile(), nil
		},
	}
	if !c.Unlisted {
		// A learned app nobody listed: limit it as a standard internal app.
		spec.Learn = func(id apps.App) (providers.Profile, string, error) {
			if !validName(id.ID) {
				return providers.Profile{}, "", errors.New("not an AppKey")
			}
			a := App{AppKey: id.ID}
			if id.Org != "" {
				// Its token named an org: an ISV suite's customer org
				// (corpAccessToken, get_corp_token), or the org of an
				// internal app (/v1.0/oauth2/{corpId}/token), which the
				// token does not tell apart. Either way the per-API and
				// monthly limits are the org's: limit it per org, each org
				// its own (as a listed suite's), at an internal app's rate,
				// which is an internal app's limit and below a suite's.
				// Charged to one app, a suite's customers shared one rate
				// and one month, and one org's 90020 stopped them all.
				std, err := c.merge(a).withDefaults()
				if err != nil {
					return providers.Profile{}, "", err
				}
				a.ISV, a.CorpID, a.ISVRate = true, id.Org, std.PerAPIRate
			}
			pr, err := c.build(a)
			if err != nil {
				return providers.Profile{}, "", err
			}
			return pr.profile(), id.ID, nil
		}
	}
	set, err := appset.Build(spec)
	if err != nil {
		return nil, err
	}
	p.set = set
	return p, nil
}

// MustNew is New that panics on an invalid config, for configs written as
// literals.
func MustNew(c Config) *Preset {
	p, err := New(c)
	if err != nil {
		panic(err)
	}
	return p
}

// Add adds or replaces an app while the service runs; requests of that app
// use its rules from then on.
func (p *Preset) Add(a App) error {
	if p == nil {
		return errors.New("dingtalk: " + appset.ErrNil.Error())
	}
	pr, err := p.cfg.build(a)
	if err != nil {
		return err
	}
	p.set.Add(a.AppKey, pr.profile())
	return p.rebuilds.Added(a)
}

// Profile returns the profile of every app, for throttle.WithProfiles.
func (p *Preset) Profile() providers.Profile {
	if p == nil {
		return appset.Nil(Name)
	}
	prof := p.set.Profile()
	if p.cfg.Jitter == 0 && !p.cfg.NoJitter {
		// No Jitter chosen: the Transport measures the allowance, starting
		// from the old default, and rebuilds the preset with it.
		prof.Headroom = p.rebuilds.Headroom(defaultJitter, func(j time.Duration) (*Preset, error) {
			next := p.cfg
			next.Jitter = j
			return New(next)
		}, func(np *Preset) providers.Profile { return np.set.Profile() })
	}
	return prof
}

// build merges one app into the deployment, fills the defaults and builds
// its preset.
func (c *Config) build(a App) (*preset, error) {
	if err := c.checkSigns(a); err != nil {
		return nil, err
	}
	s := c.merge(a)
	if s.ISV {
		own := s.OrgFromRequest
		s.OrgFromRequest = func(req *http.Request) string {
			if id, ok := apps.FromContext(req.Context()); ok && id.Org != "" {
				return id.Org
			}
			if own != nil {
				return own(req)
			}
			return ""
		}
	}
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	return newPreset(s)
}

// profile is the preset of one app as a profile.
func (p *preset) profile() providers.Profile {
	return providers.Profile{
		Name:           Name,
		Match:          p.match,
		Route:          p.route,
		Classify:       p.classify,
		DefaultPenalty: p.cfg.DefaultPenalty,
	}
}
