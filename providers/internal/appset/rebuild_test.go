package appset

import (
	"slices"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers"
)

// fakePreset records the apps added to it.
type fakePreset struct {
	jitter time.Duration
	apps   []string
}

func (f *fakePreset) Add(a string) error { f.apps = append(f.apps, a); return nil }

// A rebuild replays the apps added before it (one entry per app); an app
// added after it reaches the live rebuild of every Transport's Headroom; the
// rebuild never gets a Jitter of 0.
func TestRebuildsReplayAndForward(t *testing.T) {
	r := Rebuilds[string, *fakePreset]{ID: func(a string) string { return a }}
	if err := r.Added("before"); err != nil {
		t.Fatal(err)
	}
	if err := r.Added("before"); err != nil {
		t.Fatal(err)
	}
	var live *fakePreset
	h := r.Headroom(50*time.Millisecond, func(j time.Duration) (*fakePreset, error) {
		live = &fakePreset{jitter: j}
		return live, nil
	}, func(*fakePreset) providers.Profile { return providers.Profile{} })
	if _, err := h.Rebuild(0); err != nil {
		t.Fatal(err)
	}
	if live.jitter <= 0 {
		t.Errorf("rebuilt with Jitter %v, want above 0", live.jitter)
	}
	first := live
	other := r.Headroom(50*time.Millisecond, func(j time.Duration) (*fakePreset, error) {
		live = &fakePreset{jitter: j}
		return live, nil
	}, func(*fakePreset) providers.Profile { return providers.Profile{} })
	if _, err := other.Rebuild(7 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := r.Added("after"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"before", "after"}; !slices.Equal(first.apps, want) || !slices.Equal(live.apps, want) {
		t.Errorf("live rebuilds hold %q and %q, want %q in each", first.apps, live.apps, want)
	}
}
