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
