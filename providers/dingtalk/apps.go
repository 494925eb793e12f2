package dingtalk

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/appset"
	"github.com/quotaware/throttle/providers/internal/strikes"
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
	rebuilds *appset.Rebuilds[App, *Preset]            // for a new latency allowance
	heard    func(scope, code string, until time.Time) // the ladder's, counted once for the deployment
}

// New builds the preset of a Config listing one app or many. It fails,
// naming the app and field, when the config cannot describe working apps.
func New(c Config) (*Preset, error) {
	if c.backoff == nil {
		c.backoff = strikes.New(maxBackoffScopes)
	}
	first, err := c.build(App{AppKey: unknownApp})
	if err != nil {
		return nil, err // a deployment-wide field, whatever the app
	}
	// The ladder's record (c.backoff) and steps are the deployment's, the
	// same for every app: a penalty heard is counted once, not by each app.
	p := &Preset{cfg: c, heard: first.heard, rebuilds: &appset.Rebuilds[App, *Preset]{ID: func(a App) string { return a.AppKey }}}
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
		Default:          c.Default,
		AllowEmpty:       true, // robots alone need no app
		CheckDefault:     checkDefault,
		UnknownReadsApps: true,
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
			internal, err := c.build(App{AppKey: id.ID})
			if err != nil {
				return providers.Profile{}, "", err
			}
			perOrg, err := c.build(App{AppKey: id.ID, ISV: true, ISVRate: internal.cfg.PerAPIRate})
			if err != nil {
				return providers.Profile{}, "", err
			}
			return byOrg(internal, perOrg), id.ID, nil
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

// checkDefault vets the app that requests of no known app go to.
func checkDefault(a App) error {
	if a.ISV && a.CorpID == "" {
		// Requests of unknown apps name no customer org (the token calls
		// among them): they could not be routed.
		return errors.New("is an ISV suite without a CorpID")
	}
	return nil
}

// Add adds or replaces an app while the service runs; requests of that app
// use its rules from then on, and so do requests of no known app when it
// replaces the app they go to (Config.Default, or the only app listed).
func (p *Preset) Add(a App) error {
	if p == nil || p.set == nil {
		return errors.New("dingtalk: " + appset.ErrNil.Error())
	}
	switch {
	case p.cfg.Default != "" && a.AppKey == p.cfg.Default:
		if err := checkDefault(a); err != nil {
			return fmt.Errorf("dingtalk: Add: Config.Default %q %w", a.AppKey, err)
		}
	case a.AppKey == p.set.FallbackKey():
		// The only app listed, which requests of no known app go to:
		// replaced by an app that cannot take them, they would fail.
		if err := checkDefault(a); err != nil {
			return fmt.Errorf("dingtalk: Add: %q, the only app listed, takes the requests of no known app, and %w", a.AppKey, err)
		}
	}
	pr, err := p.cfg.build(a)
	if err != nil {
		return err
	}
	return p.rebuilds.Add(a, func() error { return p.set.Add(a.AppKey, a, pr.profile()) })
}

// Profile returns the profile of every app, for throttle.WithProfiles.
func (p *Preset) Profile() providers.Profile {
	if p == nil || p.set == nil { // New failed, or a zero Preset
		return appset.Nil(Name)
	}
	prof := p.set.Profile()
	prof.Heard = p.heard
	if p.cfg.Jitter == 0 && !p.cfg.NoJitter {
		// No Jitter chosen: the Transport measures the allowance, starting
		// from the old default, and rebuilds the preset with it.
		prof.Headroom = p.rebuilds.Headroom(defaultJitter, func(j time.Duration) (*Preset, error) {
			next := p.cfg
			next.Jitter = j
			return New(next)
		}, func(np *Preset) providers.Profile {
			pr := np.set.Profile()
			pr.Heard = np.heard
			return pr
		})
	} else if !p.cfg.NoJitter {
		// A late wake books again rather than crowd a window (the
		// measured allowance's check, with the Jitter chosen).
		prof.Jitter = p.cfg.Jitter
	}
	return prof
}

// build merges one app into the deployment, fills the defaults and builds
// its preset.
func (c *Config) build(a App) (*preset, error) {
	if err := c.checkGiven(a); err != nil {
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

// byOrg is the profile of an app nobody listed, chosen per request by
// whether the request's token named an org: an ISV suite's customer org
// (corpAccessToken, get_corp_token), or the org of an internal app
// (/v1.0/oauth2/{corpId}/token), which the token does not tell apart.
// With an org, the per-API and monthly limits are the org's: each org
// its own (as a listed suite's), at an internal app's rate, which is an
// internal app's limit and below a suite's. Charged to one app, a suite's
// customers shared one rate and one month, and one org's 90020 stopped
// them all. Chosen per request, not by the first token seen, every
// replica routes a request alike.
func byOrg(internal, perOrg *preset) providers.Profile {
	pick := func(req *http.Request) *preset {
		if id, ok := apps.FromContext(req.Context()); ok && id.Org != "" {
			return perOrg
		}
		return internal
	}
	p := internal.profile()
	p.Route = func(req *http.Request) (providers.Route, error) { return pick(req).route(req) }
	p.Classify = func(req *http.Request, resp *http.Response, r *providers.Route) providers.Verdict {
		return pick(req).classify(req, resp, r)
	}
	return p
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
