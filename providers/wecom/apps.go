package wecom

import (
	"errors"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/appset"
)

// unknownCorp is the CorpID of the shared scope that requests of unknown
// companies are charged to when Config.Default is empty.
const unknownCorp = "unknown"

// Preset is the WeCom preset: one profile that charges every request to
// its own company's limits, told by the App the Transport attaches to it
// (learned from the gettoken or third-party get_corp_token exchange, or
// given by throttle.ContextWithApp with the CorpID, or
// throttle.ContextWithTenant with the suite and the CorpID). Build it with
// New or MustNew, give its Profile to throttle.WithProfiles, and Add
// companies while it runs. Safe for concurrent use.
type Preset struct {
	cfg Config
	set *appset.Set
}

// New builds the preset of a Config listing no company, one or many,
// naming the entry and field of a config that cannot work.
func New(c Config) (*Preset, error) {
	if len(c.Apps) == 0 && c.Default != "" {
		return nil, errors.New("wecom: Config.Default needs Apps")
	}
	if c.Unknown.CorpID != "" {
		return nil, errors.New("wecom: Config.Unknown.CorpID must be empty: Unknown is every company Apps does not list")
	}
	if _, err := c.profile(c.unknown(unknownCorp)); err != nil {
		return nil, appset.UnknownError("wecom", err)
	}
	p := &Preset{cfg: c}
	spec := appset.Spec[App]{
		Name:       Name,
		Apps:       c.Apps,
		ID:         func(a App) string { return a.CorpID },
		Build:      c.profile,
		Default:    c.Default,
		Unknown:    func([]App) (providers.Profile, error) { return c.profile(c.unknown(unknownCorp)) },
		Key:        corpOf,
		AllowEmpty: true,
	}
	if !c.Unlisted {
		spec.Learn = func(app apps.App) (providers.Profile, string, error) {
			pr, err := c.profile(c.unknown(corpOf(app)))
			return pr, corpOf(app), err
		}
	}
	set, err := appset.Build(spec)
	if err != nil {
		return nil, err
	}
	p.set = set
	return p, nil
}

// corpOf is the company whose limits a request counts against: the
// authorising company of a third-party app's token, else the app's own.
func corpOf(app apps.App) string {
	if app.Org != "" {
		return app.Org
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

// Add adds or replaces a company while the service runs; requests of that
// company use its rules from then on, and so do requests of no known company
// when it replaces the one they go to (Config.Default, or the only company
// listed).
func (p *Preset) Add(a App) error {
	if p == nil || p.set == nil {
		return errors.New("wecom: " + appset.ErrNil.Error())
	}
	pr, err := p.cfg.profile(a)
	if err != nil {
		return err
	}
	return p.set.Add(a.CorpID, a, pr)
}

// Profile returns the profile of every company, for throttle.WithProfiles.
func (p *Preset) Profile() providers.Profile {
	if p == nil || p.set == nil { // New failed, or a zero Preset
		return appset.Nil(Name)
	}
	return p.set.Profile()
}

// profile builds company a's profile in the deployment c.
func (c *Config) profile(a App) (providers.Profile, error) {
	if err := a.checkSigns(); err != nil {
		return providers.Profile{}, err
	}
	return profileOf(c.merge(a))
}

// unknown is Config.Unknown's limits for one company.
func (c *Config) unknown(corp string) App {
	a := c.Unknown
	a.CorpID = corp
	return a
}
