package appset

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
)

// Set is one profile for many apps of one provider: each request is
// routed and classified by the profile of its app, told by the App the
// Transport attached to its context (apps.FromContext); a request of no
// known app goes to the fallback profile. Presets build one from a config
// per app (e.g. wechat.New, through Build); apps may be added while requests flow.
// Safe for concurrent use.
type Set struct {
	name  string
	match func(*http.Request) bool
	build func(apps.App) (providers.Profile, string, error)
	key   func(apps.App) string
	clock func() time.Time

	// fallback is replaced when Add replaces the listed app it is
	// (fallbackKey; "" when it is none).
	fallback    atomic.Pointer[providers.Profile]
	fallbackKey string
	// relist, when the fallback is the conservative profile of no listed
	// app, builds it again with app among the listed ones (Build); nil
	// otherwise. Called under mu.
	relist func(app any) (providers.Profile, error)

	mu   sync.Mutex                                    // serialises writers of byID
	byID atomic.Pointer[map[string]*providers.Profile] // the apps listed (New, Add)

	// The apps built as requests named them (Config.Build), at most
	// maxLearned: an exchange names its app before any answer, so a
	// caller that sends exchanges of made-up app IDs would otherwise grow
	// the set without end.
	learned  sync.Map // key → *providers.Profile
	nLearned atomic.Int64

	// known holds the limits learned so far (lower), to apply to every
	// profile built later: the Transport applies a stored limit when it
	// first reads it, which a profile built after that never sees. Sets
	// rebuilt from one preset share it (ShareKnown).
	known *knownLimits
}

// knownLimits are the learned limits of a Set and its rebuilds.
type knownLimits struct {
	mu sync.Mutex
	m  map[learnedID]providers.Learned
}

// learnedID is what a learned limit is about; a newer one replaces it.
type learnedID struct{ window, app, api string }

// maxKnown bounds the learned limits a Set keeps for profiles built later;
// past it, lapsed ones go first, then the new one is not kept (the
// profiles built so far have it already).
const maxKnown = 4096

// maxLearned bounds the apps a Set builds on its own; past it, building
// one forgets another, which is built again when a request names it.
const maxLearned = 10_000

// Config says how a Set finds and builds profiles.
type Config struct {
	// Name is the provider's profile name; Match the requests it handles.
	Name  string
	Match func(*http.Request) bool
	// Fallback handles requests of unknown apps: a default app's profile,
	// or a conservative shared one.
	Fallback providers.Profile
	// FallbackKey is the key of the listed app Fallback is, "" when it is
	// none: Add replacing that app replaces the fallback too, so that
	// requests of no app tag use the new rules as the app's own do.
	FallbackKey string
	// Build returns the profile of an app the set does not hold yet, with
	// the key it is kept under (e.g. app and tenant), or an error to send
	// the request to Fallback. Nil: unlisted apps go to Fallback.
	Build func(apps.App) (p providers.Profile, key string, err error)
	// Key returns the key a request's app is kept under (default apps.App.ID).
	Key func(apps.App) string
	// Clock tells when a learned limit lapses (nil: time.Now).
	Clock func() time.Time
}

// New returns a Set holding profiles, keyed by keys[i].
func New(c Config, keys []string, profiles []providers.Profile) (*Set, error) {
	switch {
	case c.Name == "":
		return nil, fmt.Errorf("appset: Config.Name must not be empty")
	case c.Match == nil:
		return nil, fmt.Errorf("appset: Config.Match must not be nil")
	case c.Fallback.Route == nil:
		return nil, fmt.Errorf("appset: Config.Fallback must be a profile with a Route")
	case len(keys) != len(profiles):
		return nil, fmt.Errorf("appset: %d keys for %d profiles", len(keys), len(profiles))
	}
	s := &Set{name: c.Name, match: c.Match, build: c.Build, fallbackKey: c.FallbackKey, known: &knownLimits{}}
	fallback := c.Fallback
	s.fallback.Store(&fallback)
	s.key, s.clock = c.Key, c.Clock
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.key == nil {
		s.key = func(a apps.App) string { return a.ID }
	}
	m := make(map[string]*providers.Profile, len(profiles))
	for i := range profiles {
		m[keys[i]] = &profiles[i]
	}
	s.byID.Store(&m)
	return s, nil
}

// Add adds or replaces the profile kept under key, as a listed app (app is
// the preset's entry of it), and the fallback when it is that app, or when
// it is the conservative profile of no app, which the listed apps set
// (DingTalk's: the lowest rate of any). It fails, changing nothing, when
// that profile cannot be built.
func (s *Set) Add(key string, app any, p providers.Profile) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fallback *providers.Profile
	if s.relist != nil {
		fb, err := s.relist(app)
		if err != nil {
			return err
		}
		fallback = &fb
	}
	old := *s.byID.Load()
	next := make(map[string]*providers.Profile, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[key] = &p
	s.byID.Store(&next)
	s.applyKnown(&p)
	if key == s.fallbackKey && key != "" {
		fallback = &p
	}
	if fallback != nil {
		s.fallback.Store(fallback)
		if fallback != &p { // p has them already
			s.applyKnown(fallback)
		}
	}
	if _, ok := s.learned.LoadAndDelete(key); ok {
		s.nLearned.Add(-1)
	}
	return nil
}

// FallbackKey is the key of the listed app that requests of no known app
// go to (Config.Default, or the only app listed), or "" when they go to a
// profile of no app.
func (s *Set) FallbackKey() string { return s.fallbackKey }

// Len is how many profiles the set holds.
func (s *Set) Len() int { return len(*s.byID.Load()) + int(s.nLearned.Load()) }

// Pick returns the profile of the request's app.
func (s *Set) Pick(req *http.Request) *providers.Profile {
	app, ok := apps.FromContext(req.Context())
	if !ok || (app.Provider != "" && app.Provider != s.name) {
		return s.fallback.Load()
	}
	key := s.key(app)
	if p := (*s.byID.Load())[key]; p != nil {
		return p
	}
	if tok, ok := apps.TokenApp(req.Context()); ok && tok.Provider == s.name && tok.ID != app.ID {
		// An app the caller named with no provider (ContextWithApp) that
		// this set does not list, beside a token this replica knows as
		// one of this provider's apps: the tag was meant for another
		// provider (a context reused across providers), and the request
		// is charged to the token's app, before any profile built for
		// the tag earlier (when the token was not known yet) and whether
		// or not the set builds unlisted apps.
		return s.Pick(req.WithContext(apps.NewContext(req.Context(), tok)))
	}
	if p, ok := s.learned.Load(key); ok {
		return p.(*providers.Profile)
	}
	if s.build == nil {
		return s.fallback.Load()
	}
	p, key, err := s.build(app)
	if err != nil {
		return s.fallback.Load()
	}
	return s.learn(key, p)
}

// learn keeps p, built for a request's app, under key, forgetting another
// learned app once maxLearned are kept (which one is left to the map's
// order: a flood of made-up IDs mostly evicts its own).
func (s *Set) learn(key string, p providers.Profile) *providers.Profile {
	if old, loaded := s.learned.LoadOrStore(key, &p); loaded {
		return old.(*providers.Profile)
	}
	s.applyKnown(&p)
	if s.nLearned.Add(1) > maxLearned {
		s.learned.Range(func(k, _ any) bool {
			if k == key {
				return true
			}
			if _, ok := s.learned.LoadAndDelete(k); ok {
				s.nLearned.Add(-1)
				return false
			}
			return true // another learner took that one
		})
	}
	return &p
}

// Profile returns the set as one profile, for throttle.WithProfiles.
func (s *Set) Profile() providers.Profile {
	return providers.Profile{
		Name:  s.name,
		Match: s.match,
		Route: func(req *http.Request) (providers.Route, error) {
			return s.Pick(req).Route(req)
		},
		Classify: func(req *http.Request, resp *http.Response, r *providers.Route) providers.Verdict {
			if p := s.Pick(req); p.Classify != nil {
				return p.Classify(req, resp, r)
			}
			return providers.Verdict{}
		},
		DefaultPenalty: s.fallback.Load().DefaultPenalty,
		Lower:          s.lower,
		Heard:          s.heardFunc(),
		Apps:           len(*s.byID.Load()),
	}
}

// heardFunc is the set's Heard, nil when its profiles hear nothing (they
// are built alike: the fallback says), so that a penalty heard costs no
// walk over every app.
func (s *Set) heardFunc() func(scope, code string, until time.Time) {
	if s.fallback.Load().Heard == nil {
		return nil
	}
	return s.heard
}

// heard tells every profile of the set that hears penalties of one another
// replica recorded (providers.Profile.Heard): each keeps those of its own
// scopes. Profiles built later have not met the incident, as a replica
// started later has not.
func (s *Set) heard(scope, code string, until time.Time) {
	if fb := s.fallback.Load(); fb.Heard != nil {
		fb.Heard(scope, code, until)
	}
	for _, p := range *s.byID.Load() {
		if p.Heard != nil {
			p.Heard(scope, code, until)
		}
	}
	s.learned.Range(func(_, v any) bool {
		if p := v.(*providers.Profile); p.Heard != nil {
			p.Heard(scope, code, until)
		}
		return true
	})
}

// lower applies a limit learned from an answer to every profile of the
// set that learns limits (Feishu: an API's level is the same for every
// app), and keeps it for the profiles built later (applyKnown). It is kept
// before the profiles are gone through, and a profile is stored before
// what is kept is applied to it, so that one built meanwhile gets it
// either way.
func (s *Set) lower(l providers.Learned) bool {
	s.keep(l)
	lowered := false
	if fb := s.fallback.Load(); fb.Lower != nil {
		lowered = fb.Lower(l)
	}
	for _, p := range *s.byID.Load() {
		if p.Lower != nil && p.Lower(l) {
			lowered = true
		}
	}
	s.learned.Range(func(_, v any) bool {
		if p := v.(*providers.Profile); p.Lower != nil && p.Lower(l) {
			lowered = true
		}
		return true
	})
	return lowered
}

// keep records l for the profiles built later.
func (s *Set) keep(l providers.Learned) {
	k := s.known
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[learnedID]providers.Learned{}
	}
	id := learnedID{l.Window, l.App, l.API}
	now := s.clock()
	old, ok := k.m[id]
	if ok && now.Before(old.Until) {
		// As the profiles do. A limit of every app only lowers while the
		// one in force holds: a later one above it (another replica's,
		// stored last) must not raise a profile built later. An app's
		// quota reading may raise, but never gives way to an older one.
		if l.App == "" && old.Limit <= l.Limit || l.App != "" && l.Until.Before(old.Until) {
			return
		}
	}
	if !ok && len(k.m) >= maxKnown {
		for id, v := range k.m {
			if !now.Before(v.Until) {
				delete(k.m, id)
			}
		}
		if len(k.m) >= maxKnown {
			return
		}
	}
	k.m[id] = l
}

// applyKnown applies to p, just built, the learned limits kept (its Lower
// ignores those lapsed on the profile's clock).
func (s *Set) applyKnown(p *providers.Profile) {
	if p.Lower == nil {
		return
	}
	k := s.known
	k.mu.Lock()
	ls := make([]providers.Learned, 0, len(k.m))
	for _, l := range k.m {
		ls = append(ls, l)
	}
	k.mu.Unlock()
	for _, l := range ls {
		p.Lower(l)
	}
}

// ShareKnown makes s, a rebuild of from's preset (for another latency
// allowance) not yet in use, keep its learned limits with from's, and
// applies them to the profiles s holds: a profile s builds later would
// otherwise run at the table's level while every replica read the stored
// limit as seen.
func (s *Set) ShareKnown(from *Set) {
	s.known = from.known
	s.applyKnown(s.fallback.Load())
	for _, p := range *s.byID.Load() {
		s.applyKnown(p)
	}
}
