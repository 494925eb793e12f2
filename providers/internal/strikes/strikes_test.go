package strikes

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

func TestLadderClimbsAndStartsAgain(t *testing.T) {
	l := &Ladder{Steps: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, Window: 10 * time.Second}
	b := New(8)
	now := t0
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		until := b.Penalty("s", now, l)
		if got := until.Sub(now); got != want {
			t.Fatalf("strike %d: %v, want %v", i+1, got, want)
		}
		// An error while it runs is the same incident.
		if again := b.Penalty("s", now.Add(time.Millisecond), l); !again.Equal(until) {
			t.Fatalf("strike %d repeated in flight: %v, want the same end %v", i+1, again, until)
		}
		now = until.Add(time.Second) // comes back soon after the end
	}
	// Quiet past the window: the ladder starts again.
	now = now.Add(time.Minute)
	if got := b.Penalty("s", now, l).Sub(now); got != time.Second {
		t.Fatalf("after a quiet spell: %v, want the first step", got)
	}
	// Another scope has its own ladder.
	if got := b.Penalty("other", now, l).Sub(now); got != time.Second {
		t.Fatalf("another scope: %v, want the first step", got)
	}
}

func TestTopPastTheLastStep(t *testing.T) {
	day := t0.Add(14 * time.Hour)
	l := &Ladder{Steps: []time.Duration{time.Minute, time.Hour}, Window: 10 * time.Minute,
		Top: func(time.Time) time.Time { return day }}
	b := New(8)
	now := t0
	for range 2 {
		now = b.Penalty("s", now, l).Add(time.Second)
	}
	if got := b.Penalty("s", now, l); !got.Equal(day) {
		t.Fatalf("third strike: %v, want Top's %v", got, day)
	}
	if got := b.Penalty("s", day.Add(time.Second), l); !got.Equal(day) {
		t.Fatalf("fourth strike: %v, want Top's %v again", got, day)
	}
}

func TestBounded(t *testing.T) {
	l := &Ladder{Steps: []time.Duration{time.Minute}, Window: time.Minute}
	b := New(3)
	for i := range 10 {
		b.Penalty(fmt.Sprint("scope", i), t0, l)
		if n := b.Len(); n > 3 {
			t.Fatalf("%d strikes kept, bound 3", n)
		}
	}
}

// A penalty another replica gave is a strike here: the next error after
// it climbs from its step, read from its length (what is left of it when
// heard, the sender's clock up to half a second ahead); a stated end past
// a ladder without Top is none of the ladder's; it never lowers a strike
// of the same incident or replaces one ending later.
func TestHeardPenaltyIsAStrike(t *testing.T) {
	l := &Ladder{Steps: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, Window: 10 * time.Second}
	for _, tc := range []struct {
		name  string
		heard time.Duration // left of the heard penalty when heard, at t0
		next  time.Duration // the penalty of the next error, a second after its end
	}{
		{"a first step", time.Second, 2 * time.Second},
		{"a first step from a clock 300 ms ahead", 1300 * time.Millisecond, 2 * time.Second},
		{"a second step", 2 * time.Second, 4 * time.Second},
		{"a second step heard 600 ms late reads as the first", 1400 * time.Millisecond, 2 * time.Second},
		{"the last step", 4 * time.Second, 4 * time.Second},
		{"a stated end past every step", time.Minute, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(8)
			until := t0.Add(tc.heard)
			b.Heard("s", until, t0, l)
			now := until.Add(time.Second)
			if got := b.Penalty("s", now, l).Sub(now); got != tc.next {
				t.Errorf("the next error: %v, want %v", got, tc.next)
			}
		})
	}
	b := New(8)
	long := b.Penalty("s", t0, l)                     // 1 s here
	b.Heard("s", t0.Add(500*time.Millisecond), t0, l) // ends sooner: stays as it was
	if got := b.Penalty("s", t0.Add(100*time.Millisecond), l); !got.Equal(long) {
		t.Errorf("a heard penalty ending sooner replaced the strike: %v, want %v", got, long)
	}
	// In flight when heard: the same incident, its end.
	b.Heard("s", t0.Add(3*time.Second), t0.Add(900*time.Millisecond), l)
	if got := b.Penalty("s", t0.Add(2*time.Second), l); !got.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("an error during the heard penalty: until %v, want its end", got)
	}
	// Top past the last step.
	top := &Ladder{Steps: []time.Duration{time.Minute}, Window: time.Hour, Top: func(now time.Time) time.Time { return now.Add(24 * time.Hour) }}
	b = New(8)
	b.Heard("s", t0.Add(20*time.Hour), t0, top)
	now := t0.Add(20*time.Hour + time.Minute)
	if got := b.Penalty("s", now, top); !got.Equal(now.Add(24 * time.Hour)) {
		t.Errorf("after a heard day's block: until %v, want Top's", got)
	}
}
