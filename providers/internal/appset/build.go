package appset

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
)

// Spec is what a preset tells Build about its apps: the one skeleton of
// the four presets' constructors (listed apps, the default app or the
// unknown apps' scope, apps learned but not listed).
type Spec[A any] struct {
	// Name is the provider's profile name, and the prefix of errors.
	Name string
	// Apps are the listed apps; ID returns the key one is kept under.
	Apps []A
	ID   func(A) string
	// Build returns the profile of one listed app.
	Build func(A) (providers.Profile, error)
	// Default is Config.Default: the listed app requests of unknown apps
	// are charged to. Empty: the one app when only one is listed (a
	// deployment of one app charges every request to it) and CheckDefault
	// takes it, else Unknown's profile.
	Default string
	// Unknown builds the unknown apps' shared scope when Default is empty;
	// it is given the listed apps.
	Unknown func(listed []A) (providers.Profile, error)
	// UnknownReadsApps says that Unknown's profile depends on the listed
	// apps (DingTalk's lowest rate of any): an app added later makes Add
	// build it again. Presets whose Unknown ignores them leave it false, and
	// their shared scope's profile, with what it holds, stays as built.
	UnknownReadsApps bool
	// CheckDefault vets the default app (nil: any listed app will do).
	CheckDefault func(A) error
	// Learn builds the profile of an app learned from a token but not
	// listed (nil: such requests go to the fallback), with its key.
	Learn func(apps.App) (providers.Profile, string, error)
	// Key returns the key a request's app is kept under (default its ID).
	Key func(apps.App) string
	// AllowEmpty accepts a Config without Apps (every app learned).
	AllowEmpty bool
	// Clock tells when a learned limit lapses (nil: time.Now); the
	// preset's own, so that the set and its profiles agree.
	Clock func() time.Time
}

// Build builds the Set of a preset's Config, naming the entry and field of
// an app that cannot work ("<name>: Config.Apps[i]: ...").
func Build[A any](s Spec[A]) (*Set, error) {
	if len(s.Apps) == 0 && !s.AllowEmpty {
		return nil, fmt.Errorf("%s: Config.Apps must list at least one app", s.Name)
	}
	keys := make([]string, 0, len(s.Apps))
	profiles := make([]providers.Profile, 0, len(s.Apps))
	fallback := -1
	seen := make(map[string]int, len(s.Apps))
	for i, a := range s.Apps {
		// One app listed twice: which entry wins would be silent, and two
		// entries would also count as two apps (no default app).
		if j, dup := seen[s.ID(a)]; dup {
			return nil, fmt.Errorf("%s: Config.Apps[%d] lists %q again (Config.Apps[%d])", s.Name, i, s.ID(a), j)
		}
		seen[s.ID(a)] = i
		p, err := s.Build(a)
		if err != nil {
			return nil, entryError(s.Name, fmt.Sprintf("Config.Apps[%d]", i), err)
		}
		keys, profiles = append(keys, s.ID(a)), append(profiles, p)
		if s.Default != "" && s.ID(a) == s.Default {
			fallback = i
		}
	}
	if s.Default == "" && len(s.Apps) == 1 && (s.CheckDefault == nil || s.CheckDefault(s.Apps[0]) == nil) {
		// One app: every request is its, unless it cannot take requests
		// of no app (DingTalk's ISV suite without a CorpID names no org
		// for them): those go to Unknown's scope rather than fail.
		fallback = 0
	}
	var fb providers.Profile
	var fbKey string
	switch {
	case s.Default != "" && fallback < 0:
		return nil, fmt.Errorf("%s: Config.Default %q is not one of Apps", s.Name, s.Default)
	case fallback >= 0:
		if s.CheckDefault != nil && s.Default != "" {
			if err := s.CheckDefault(s.Apps[fallback]); err != nil {
				return nil, fmt.Errorf("%s: Config.Default %q %w", s.Name, s.Default, err)
			}
		}
		fb, fbKey = profiles[fallback], keys[fallback]
	default:
		p, err := s.Unknown(s.Apps)
		if err != nil {
			return nil, fmt.Errorf("%s: Config: %w", s.Name, err)
		}
		fb = p
	}
	// Every app of a preset shares the deployment's hosts: the fallback's
	// Match is everyone's.
	set, err := New(Config{Name: s.Name, Match: fb.Match, Fallback: fb, FallbackKey: fbKey, Build: s.Learn, Key: s.Key, Clock: s.Clock}, keys, profiles)
	if err != nil || fallback >= 0 || !s.UnknownReadsApps {
		return set, err
	}
	// The conservative profile depends on the listed apps: an app added
	// later is one of them.
	listed := slices.Clone(s.Apps)
	set.relist = func(app any) (providers.Profile, error) {
		a, ok := app.(A)
		if !ok {
			return providers.Profile{}, fmt.Errorf("%s: Add: an app of type %T", s.Name, app)
		}
		next := slices.Clone(listed)
		if i := slices.IndexFunc(next, func(b A) bool { return s.ID(b) == s.ID(a) }); i >= 0 {
			next[i] = a
		} else {
			next = append(next, a)
		}
		p, err := s.Unknown(next)
		if err != nil {
			return providers.Profile{}, fmt.Errorf("%s: Config: %w", s.Name, err)
		}
		listed = next
		return p, nil
	}
	return set, nil
}

// ErrNil is Add's answer on a nil preset (a New error ignored) or a zero one.
var ErrNil = errors.New("Add on a nil or zero *Preset (New failed, or the Preset was not built by New?)")

// Nil is the profile of a nil preset: Validate names its missing Match.
func Nil(name string) providers.Profile { return providers.Profile{Name: name} }

// UnknownError is the error of building the profile of the apps a preset
// does not list (Config.Unknown): it names Config.Unknown, unless the error
// is about a deployment-wide field (Config.X), which it names already.
func UnknownError(name string, err error) error {
	if strings.HasPrefix(err.Error(), name+": Config.") {
		return err
	}
	return entryError(name, "Config.Unknown", err)
}

// entryError names the entry of a preset's config an error is about, with
// the preset's name once: the presets' own errors start with it.
func entryError(name, entry string, err error) error {
	return &namedError{msg: name + ": " + entry + ": " + strings.TrimPrefix(err.Error(), name+": "), err: err}
}

// namedError is an error with a message of its own that still unwraps to
// the one it names.
type namedError struct {
	msg string
	err error
}

func (e *namedError) Error() string { return e.msg }
func (e *namedError) Unwrap() error { return e.err }
