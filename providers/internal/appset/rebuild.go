package appset

import (
	"sync"
	"time"

	"github.com/quotaware/throttle/providers"
)

// Rebuilds is what a preset keeps to rebuild itself with another latency
// allowance (providers.Headroom.Rebuild): the apps added since New, which
// every rebuild replays, and the latest rebuild of each Headroom handed out
// (each Transport given the preset's Profile has its own), which the
// Transport routes with and which later Adds must reach too. Without it an
// app added after a rebuild would route by the fallback until the next one.
// The zero value is ready; ID, when set, keeps one entry per app, so that
// an app added again replaces its entry instead of growing the list.
type Rebuilds[A any, P interface{ Add(A) error }] struct {
	ID func(A) string

	mu    sync.Mutex // serialises Add and Rebuild
	added []A
	live  map[*liveSlot[P]]struct{}
}

// liveSlot is the latest rebuild of one Headroom.
type liveSlot[P any] struct{ p P }

// Add has the preset take a (take: its own Add), then records a and adds
// it to every live rebuild, all under one lock, so that Adds of one app at
// once leave the preset, the list the rebuilds replay and the live
// rebuilds holding the same entry (taken and recorded apart, the preset
// could keep one and the rebuilds the other). Nothing is recorded when
// take fails.
func (r *Rebuilds[A, P]) Add(a A, take func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := take(); err != nil {
		return err
	}
	replaced := false
	if r.ID != nil {
		id := r.ID(a)
		for i := range r.added {
			if r.ID(r.added[i]) == id {
				r.added[i], replaced = a, true
				break
			}
		}
	}
	if !replaced {
		r.added = append(r.added, a)
	}
	for s := range r.live {
		if err := s.p.Add(a); err != nil {
			return err
		}
	}
	return nil
}

// rebuild returns the preset that build makes, with every added app
// replayed, and makes it slot's live one.
func (r *Rebuilds[A, P]) rebuild(slot *liveSlot[P], build func() (P, error)) (P, error) {
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
	if r.live == nil {
		r.live = map[*liveSlot[P]]struct{}{}
	}
	slot.p = np
	r.live[slot] = struct{}{}
	return np, nil
}

// Headroom asks the Transport for a measured latency allowance, starting
// at initial: each new allowance rebuilds the preset with build (given a
// Jitter of at least 1µs, as 0 means "choose" to a preset), replays the
// added apps, and the Transport routes by profile of the rebuild. Each call
// returns a Headroom of its own, for one Transport; its latest rebuild is
// kept for later Adds as long as the preset is.
func (r *Rebuilds[A, P]) Headroom(initial time.Duration, build func(jitter time.Duration) (P, error),
	profile func(P) providers.Profile) *providers.Headroom {
	slot := new(liveSlot[P])
	return &providers.Headroom{Initial: initial, Rebuild: func(a time.Duration) (providers.Profile, error) {
		np, err := r.rebuild(slot, func() (P, error) { return build(max(a, time.Microsecond)) })
		if err != nil {
			return providers.Profile{}, err
		}
		return profile(np), nil
	}}
}
