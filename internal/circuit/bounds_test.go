package circuit_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/circuit"
)

// The Set keeps at most WithMaxScopes breakers; when full it drops the one
// whose window ends first, expired windows before open ones.
func TestMaxScopes(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	c := newClock(t0)
	rec := &recorder{}
	s := newSet(t, c, circuit.WithMaxScopes(3), circuit.WithOnStateChange(rec.record))
	s.Penalize("expired", t0.Add(time.Second), "")
	s.Penalize("hour", t0.Add(time.Hour), "")
	s.Penalize("month", t0.Add(30*24*time.Hour), "")
	c.Advance(2 * time.Second)
	rec.take()

	s.Penalize("minute", c.Now().Add(time.Minute), "")
	if got := rec.take(); fmt.Sprint(got) != fmt.Sprint([]change{{"expired", circuit.HalfOpen, circuit.Closed}, {"minute", circuit.Closed, circuit.Open}}) {
		t.Fatalf("changes %v, want the expired scope dropped first", got)
	}
	s.Penalize("day", c.Now().Add(24*time.Hour), "")
	if got := rec.take(); len(got) == 0 || got[0] != (change{"minute", circuit.Open, circuit.Closed}) {
		t.Fatalf("changes %v, want the minute scope (ends first) dropped", got)
	}
	if s.Len() != 3 || s.Open() != 3 {
		t.Fatalf("Len %d Open %d, want 3 and 3", s.Len(), s.Open())
	}
	for sc, want := range map[string]circuit.State{
		"expired": circuit.Closed, "minute": circuit.Closed,
		"hour": circuit.Open, "day": circuit.Open, "month": circuit.Open,
	} {
		if got := s.State(sc); got != want {
			t.Errorf("State(%s) = %v, want %v", sc, got, want)
		}
	}
}

// A flood of distinct penalised scopes (say, one per user ID in a path)
// cannot grow the Set past its bound.
func TestFloodOfScopes(t *testing.T) {
	c := newClock(time.Unix(1_800_000_000, 0))
	s := newSet(t, c, circuit.WithMaxScopes(100))
	for i := 0; i < 20_000; i++ {
		s.Penalize(fmt.Sprintf("api:/users/%d", i), c.Now().Add(time.Duration(1+i%1000)*time.Second), "")
		if s.Len() > 100 {
			t.Fatalf("Len = %d after %d penalties, want at most 100", s.Len(), i+1)
		}
	}
	if s.Open() != 100 {
		t.Fatalf("Open = %d, want 100", s.Open())
	}
}

// However many requests race for a half-open scope, exactly one probes.
func TestConcurrentProbe(t *testing.T) {
	c := newClock(time.Unix(1_800_000_000, 0))
	s := newSet(t, c)
	s.Penalize("s", c.Now().Add(time.Second), "")
	c.Advance(time.Second)
	const n = 64
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		allowed atomic.Int32
		dones   = make(chan func(circuit.Outcome), n)
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			done, err := s.Allow([]string{"s"})
			if err == nil {
				allowed.Add(1)
				dones <- done
				return
			}
			var oe *circuit.OpenError
			if !errors.As(err, &oe) || !oe.Probing {
				t.Errorf("refusal %v, want Probing", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := allowed.Load(); got != 1 {
		t.Fatalf("%d requests probed at once, want exactly 1", got)
	}
	(<-dones)(circuit.Success)
	if s.State("s") != circuit.Closed {
		t.Fatal("not closed after the probe's success")
	}
}

// Allow, done, Penalize, State and Open from many goroutines at once, for the
// race detector, with a bound small enough to keep evicting.
func TestConcurrentUse(t *testing.T) {
	c := newClock(time.Unix(1_800_000_000, 0))
	const maxScopes = 16
	s := newSet(t, c, circuit.WithMaxScopes(maxScopes), circuit.WithOnStateChange(func(string, circuit.State, circuit.State) {}))
	scopes := make([]string, 64)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("s%d", i)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < 5000; i++ {
				a, b := scopes[r.IntN(len(scopes))], scopes[r.IntN(len(scopes))]
				switch r.IntN(10) {
				case 0:
					s.Penalize(a, c.Now().Add(time.Duration(r.IntN(50))*time.Millisecond), "")
				case 1:
					c.Advance(time.Millisecond)
				case 2:
					_ = s.State(a)
					_ = s.Open()
				default:
					done, err := s.Allow([]string{a, b})
					if err != nil {
						if !errors.Is(err, circuit.ErrOpen) {
							t.Errorf("Allow: %v", err)
						}
						continue
					}
					done(circuit.Outcome(r.IntN(2)))
				}
				if n := s.Len(); n > maxScopes {
					t.Errorf("Len = %d, want at most %d", n, maxScopes)
					return
				}
			}
		}()
	}
	wg.Wait()
}
