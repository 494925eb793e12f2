package appset

import (
	"errors"
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

func noop() error { return nil }

// A rebuild replays the apps added before it (one entry per app); an app
// added after it reaches the live rebuild of every Transport's Headroom; the
// rebuild never gets a Jitter of 0.
func TestRebuildsReplayAndForward(t *testing.T) {
	r := Rebuilds[string, *fakePreset]{ID: func(a string) string { return a }}
	if err := r.Add("before", noop); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("before", noop); err != nil {
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
	if err := r.Add("after", noop); err != nil {
		t.Fatal(err)
	}
	if want := []string{"before", "after"}; !slices.Equal(first.apps, want) || !slices.Equal(live.apps, want) {
		t.Errorf("live rebuilds hold %q and %q, want %q in each", first.apps, live.apps, want)
	}
}

// The preset takes an app under the lock that records it and that a
// rebuild holds, so that Adds of one app at once, or an Add and a rebuild,
// leave the preset and the rebuilds with the same entry: taken and
// recorded apart, one Add could be taken last and the other recorded last.
func TestRebuildsAddTakesUnderTheLock(t *testing.T) {
	var r Rebuilds[string, *fakePreset]
	if err := r.Add("app", func() error {
		if r.mu.TryLock() {
			r.mu.Unlock()
			t.Error("the preset took the app while a rebuild or another Add could run")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// An app whose preset refuses it is not recorded.
func TestRebuildsAddRefused(t *testing.T) {
	var r Rebuilds[string, *fakePreset]
	refused := errors.New("refused")
	if err := r.Add("app", func() error { return refused }); err != refused {
		t.Fatalf("Add: %v, want the preset's error", err)
	}
	if len(r.added) != 0 {
		t.Errorf("recorded %q after a refusal", r.added)
	}
}
