package appset

import (
	"sync"
	"time"

	"github.com/quotaware/throttle/providers"
)

// Rebuilds is what a preset keeps to rebuild itself with another latency
// allowance (providers.Headroom.Rebuild): the apps added since New, which
// every rebuild replays, and the latest rebuild, which the Transport routes
// with and which later Adds must reach too. Without it an app added after
// a rebuild would route by the fallback until the next one.
type Rebuilds[A any, P interface{ Add(A) error }] struct {
	mu      sync.Mutex // serialises Added and Rebuild
	added   []A
	live    P
	hasLive bool
}

// Added records a, which the preset itself has just taken, and adds it to
// the live rebuild.
func (r *Rebuilds[A, P]) Added(a A) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.added = append(r.added, a)
	if r.hasLive {
		return r.live.Add(a)
	}
	return nil
}

// Rebuild returns the preset that build makes, with every added app
// replayed, and makes it the live one.
func (r *Rebuilds[A, P]) Rebuild(build func() (P, error)) (P, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	np, err := build()
	if err != nil {
		return np, err
	}
	for _, a := range r.added {
		if err := np.Add(a); err != nil {
			return np, err
		}
	}
	r.live, r.hasLive = np, true
	return np, nil
}

// Headroom asks the Transport for a measured latency allowance, starting
// at initial: each new allowance rebuilds the preset with build (given a
// Jitter of at least 1µs, as 0 means "choose" to a preset), replays the
// added apps, and the Transport routes by profile of the rebuild.
func (r *Rebuilds[A, P]) Headroom(initial time.Duration, build func(jitter time.Duration) (P, error),
	profile func(P) providers.Profile) *providers.Headroom {
	return &providers.Headroom{Initial: initial, Rebuild: func(a time.Duration) (providers.Profile, error) {
		np, err := r.Rebuild(func() (P, error) { return build(max(a, time.Microsecond)) })
		if err != nil {
			return providers.Profile{}, err
		}
		return profile(np), nil
	}}
}
