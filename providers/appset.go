package providers

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
)

// AppSet is one profile for many apps of one provider: each request is
// routed and classified by the profile of its app, told by the App the
// Transport attached to its context (AppFrom); a request of no known app
// goes to the fallback profile. Presets build one from a config per app
// (e.g. wechat.NewApps); apps may be added while requests flow. Safe for
// concurrent use.
type AppSet struct {
	name     string
	match    func(*http.Request) bool
	fallback Profile
	build    func(App) (Profile, string, error)
	key      func(App) string

	mu   sync.Mutex // serialises writers of byID
	byID atomic.Pointer[map[string]*Profile]
}

// AppSetConfig says how an AppSet finds and builds profiles.
type AppSetConfig struct {
	// Name is the provider's profile name; Match the requests it handles.
	Name  string
	Match func(*http.Request) bool
	// Fallback handles requests of unknown apps: a default app's profile,
	// or a conservative shared one.
	Fallback Profile
	// Build returns the profile of an app the set does not hold yet, with
	// the key it is kept under (e.g. app and tenant), or an error to send
	// the request to Fallback. Nil: unlisted apps go to Fallback.
	Build func(App) (p Profile, key string, err error)
	// Key returns the key a request's app is kept under (default App.ID).
	Key func(App) string
}

// NewAppSet returns an AppSet holding profiles, keyed by keys[i].
func NewAppSet(c AppSetConfig, keys []string, profiles []Profile) (*AppSet, error) {
	if c.Name == "" || c.Match == nil || c.Fallback.Route == nil {
		return nil, fmt.Errorf("providers: AppSetConfig needs Name, Match and a Fallback profile")
	}
	s := &AppSet{name: c.Name, match: c.Match, fallback: c.Fallback, build: c.Build}
	s.key = c.Key
	if s.key == nil {
		s.key = func(a App) string { return a.ID }
	}
	m := make(map[string]*Profile, len(profiles))
	for i := range profiles {
		m[keys[i]] = &profiles[i]
	}
	s.byID.Store(&m)
	return s, nil
}

// Add adds or replaces the profile kept under key.
func (s *AppSet) Add(key string, p Profile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.byID.Load()
	next := make(map[string]*Profile, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[key] = &p
	s.byID.Store(&next)
}

// Len is how many profiles the set holds.
func (s *AppSet) Len() int { return len(*s.byID.Load()) }

// Pick returns the profile of the request's app.
func (s *AppSet) Pick(req *http.Request) *Profile {
	app, ok := AppFrom(req.Context())
	if !ok || !app.For(s.name) {
		return &s.fallback
	}
	if p := (*s.byID.Load())[s.key(app)]; p != nil {
		return p
	}
	if s.build == nil {
		return &s.fallback
	}
	p, key, err := s.build(app)
	if err != nil {
		return &s.fallback
	}
	s.Add(key, p)
	return (*s.byID.Load())[key]
}

// Profile returns the set as one profile, for throttle.WithProfiles.
func (s *AppSet) Profile() Profile {
	return Profile{
		Name:  s.name,
		Match: s.match,
		Route: func(req *http.Request) (Route, error) {
			return s.Pick(req).Route(req)
		},
		Classify: func(req *http.Request, resp *http.Response, r *Route) Verdict {
			if p := s.Pick(req); p.Classify != nil {
				return p.Classify(req, resp, r)
			}
			return Verdict{}
		},
		DefaultPenalty: s.fallback.DefaultPenalty,
	}
}
