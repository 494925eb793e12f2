package appset

import "sync"

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
