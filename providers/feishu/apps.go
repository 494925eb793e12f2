package feishu

import (
	"errors"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/appset"
)

// unknownApp is the app_id of the shared scope that requests of unknown
// apps are charged to when Config.Default is empty.
const unknownApp = "unknown"

// Preset is the Feishu preset: one profile that charges every request to
// its own app (and tenant, for a store app), told by the App the
// Transport attaches to it. Build it with New or MustNew, give its Profile
// to throttle.WithProfiles, and Add apps while it runs. Safe for
// concurrent use.
type Preset struct {
	cfg      Config
	set      *appset.Set
	memory   *messageChats                  // every app's, shared with the rebuilds
	rebuilds *appset.Rebuilds[App, *Preset] // for a new latency allowance
}

// New builds the preset of a Config listing one app or many, naming the
// entry and field of a config that cannot work.
func New(c Config) (*Preset, error) {
	return newPreset(c, newMessageChats(messageMemory))
}

// newPreset is New with the message memory of the apps' earlier presets.
func newPreset(c Config, mem *messageChats) (*Preset, error) {
	if c.Unknown.AppID != "" {
		return nil, errors.New("feishu: Config.Unknown.AppID must be empty: Unknown is every app Apps does not list")
	}
	if _, err := (&Preset{cfg: c}).profile(c.unknown(unknownApp)); err != nil {
		return nil, appset.UnknownError("feishu", err)
	}
	listed := make(map[string]App, len(c.Apps)) // never written after New, for a store app's tenants
	for _, a := range c.Apps {
		listed[a.AppID] = a
	}
	p := &Preset{cfg: c, memory: mem, rebuilds: &appset.Rebuilds[App, *Preset]{ID: func(a App) string { return a.AppID }}}
	spec := appset.Spec[App]{
		Name:    Name,
		Apps:    c.Apps,
		ID:      func(a App) string { return a.AppID },
		Build:   p.profile,
		Default: c.Default,
		Unknown: func([]App) (providers.Profile, error) { return p.profile(c.unknown(unknownApp)) },
		Key:     appKey,
		Clock:   c.Clock,
		Learn: func(app apps.App) (providers.Profile, string, error) {
			a, ok := listed[app.ID]
			if !ok {
				if c.Unlisted {
					return providers.Profile{}, "", errors.New("unlisted")
				}
				a = c.unknown(app.ID)
			}
			a.AppID = appKey(app)
			pr, err := p.profile(a)
			return pr, a.AppID, err
		},
	}
	set, err := appset.Build(spec)
	if err != nil {
		return nil, err
	}
	p.set = set
	return p, nil
}

// appKey is the unit Feishu limits: the app, in one tenant for a store app.
func appKey(app apps.App) string {
	if app.Org != "" {
		return app.ID + "@" + app.Org
	}
	return app.ID
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

// Add adds or replaces an internal app while the service runs; requests of
// that app use its rules from then on, and so do requests of no known app
// when it replaces the one they go to (Config.Default, or the only app
// listed). (A store app's new tenants need nothing: each is learned from
// its token.)
func (p *Preset) Add(a App) error {
	if p == nil || p.set == nil {
		return errors.New("feishu: " + appset.ErrNil.Error())
	}
	pr, err := p.profile(a)
	if err != nil {
		return err
	}
	return p.rebuilds.Add(a, func() error { return p.set.Add(a.AppID, a, pr) })
}

// Profile returns the profile of every app, for throttle.WithProfiles.
func (p *Preset) Profile() providers.Profile {
	if p == nil || p.set == nil { // New failed, or a zero Preset
		return appset.Nil(Name)
	}
	prof := p.set.Profile()
	if p.cfg.Jitter == 0 && !p.cfg.NoJitter {
		// No Jitter chosen: the Transport measures the allowance, starting
		// from the old default, and rebuilds the preset with it; each app
		// keeps the chats of the messages seen (memory).
		prof.Headroom = p.rebuilds.Headroom(defaultJitter, func(j time.Duration) (*Preset, error) {
			next := p.cfg
			next.Jitter = j
			np, err := newPreset(next, p.memory)
			if err == nil {
				// Apps and tenants first seen after the rebuild take the
				// levels learned before it.
				np.set.ShareKnown(p.set)
			}
			return np, err
		}, func(np *Preset) providers.Profile { return np.set.Profile() })
	} else if !p.cfg.NoJitter {
		// A late wake books again rather than crowd a window (the
		// measured allowance's check, with the Jitter chosen).
		prof.Jitter = p.cfg.Jitter
	}
	return prof
}

// profile builds app a's profile in the preset's deployment.
func (p *Preset) profile(a App) (providers.Profile, error) {
	if err := a.checkGiven(); err != nil {
		return providers.Profile{}, err
	}
	s := p.cfg.merge(a)
	s.memory = p.memory
	return profileOf(s)
}

// unknown is Config.Unknown's levels for one app. Its monthly quota is
// its own tenant's unless Unknown.Tenant says otherwise: an app nobody
// listed, or a token nobody knows, may be another company's, and counted
// in the deployment's own tenant its 99991403 would stop the listed apps.
func (c *Config) unknown(id string) App {
	a := c.Unknown
	a.AppID = id
	if a.Tenant == "" && a.FreeEdition {
		a.Tenant = id
	}
	return a
}
