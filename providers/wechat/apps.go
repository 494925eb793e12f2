package wechat

import (
	"errors"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/appset"
)

// unknownApp is the AppID of the shared scope that requests of unknown
// accounts are charged to when Config.Default is empty.
const unknownApp = "unknown"

// Preset is the WeChat preset: one profile that charges every request to
// the quotas of its own AppID, told by the App the Transport attaches to
// it (throttle.WithApps learns it from the token; throttle.ContextWithApp
// gives it). Build it with New or MustNew, give its Profile to
// throttle.WithProfiles, and Add accounts while it runs. Safe for
// concurrent use.
type Preset struct {
	cfg Config
	set *appset.Set
}

// New builds the preset of a Config listing one account or many, naming
// the entry and field of a config that cannot work.
func New(c Config) (*Preset, error) {
	if c.Unknown.AppID != "" {
		return nil, errors.New("wechat: Config.Unknown.AppID must be empty: Unknown is every account Apps does not list")
	}
	if _, err := profileOf(c.merge(c.unknown(unknownApp))); err != nil {
		return nil, appset.UnknownError("wechat", err)
	}
	p := &Preset{cfg: c}
	spec := appset.Spec[App]{
		Name:    Name,
		Apps:    c.Apps,
		ID:      func(a App) string { return a.AppID },
		Build:   func(a App) (providers.Profile, error) { return profileOf(c.merge(a)) },
		Default: c.Default,
		Unknown: func([]App) (providers.Profile, error) { return profileOf(c.merge(c.unknown(unknownApp))) },
		Clock:   c.Clock,
	}
	if !c.Unlisted {
		spec.Learn = func(app apps.App) (providers.Profile, string, error) {
			pr, err := profileOf(c.merge(c.unknown(app.ID)))
			return pr, app.ID, err
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

// Add adds or replaces an account while the service runs; requests of that
// account use its rules from then on, and so do requests of no known account
// when it replaces the one they go to (Config.Default, or the only account
// listed).
func (p *Preset) Add(a App) error {
	if p == nil || p.set == nil {
		return errors.New("wechat: " + appset.ErrNil.Error())
	}
	pr, err := profileOf(p.cfg.merge(a))
	if err != nil {
		return err
	}
	return p.set.Add(a.AppID, a, pr)
}

// Profile returns the profile of every account, for throttle.WithProfiles.
func (p *Preset) Profile() providers.Profile {
	if p == nil || p.set == nil { // New failed, or a zero Preset
		return appset.Nil(Name)
	}
	pr := p.set.Profile()
	pr.QuotaCheck = p.cfg.quotaCheck()
	return pr
}

// unknown is Config.Unknown's quotas for one account.
func (c *Config) unknown(id string) App {
	a := c.Unknown
	a.AppID = id
	return a
}
