package throttle

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// The slots a widened allowance empties keep every span of Period+rise
// within the rule's limit, wherever the slots' grid lies, and empty no
// more than ceil(rise/I) of every Limit: the contract vacated states.
func TestVacatedSlotsKeepEveryWindowWithinTheLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.IntN(40)
		burst := 1
		if trial%3 == 0 {
			burst = 1 + rng.IntN(n) // slots then lie Period/(n-burst+1) apart
		}
		base := time.Duration(200+rng.IntN(1800)) * time.Millisecond
		old := time.Duration(rng.IntN(60)) * time.Millisecond
		rise := headroomRebookRise + time.Duration(rng.IntN(200))*time.Millisecond
		r := rule.Must(rule.New("vacate", n, base+old, rule.WithBurst(burst)))
		period := r.Period()
		gap := r.Interval()
		per := int((period + gap - 1) / gap) // slots to a stretch
		// A queue of booked slots, I apart from an arbitrary start, over
		// ten periods.
		start := time.Unix(1_800_000_000, 0).Add(time.Duration(rng.Int64N(int64(period))))
		var kept []time.Time
		total := 10 * per
		for k := 0; k < total; k++ {
			at := start.Add(time.Duration(k) * gap)
			if !vacated([]rule.Rule{r}, at, rise) {
				kept = append(kept, at)
			}
		}
		// Every span of Period+rise starting at a kept send holds at most
		// n kept sends (a span's most crowded placement starts at one).
		for i, from := range kept {
			in := 0
			for _, at := range kept[i:] {
				if at.Sub(from) >= period+rise {
					break
				}
				in++
			}
			if in > n {
				t.Fatalf("n=%d burst=%d period=%v rise=%v: %d sends within %v from %v, want at most %d", n, burst, period, rise, in, period+rise, from, n)
			}
		}
		m := int((rise + gap - 1) / gap)
		if m >= per {
			if len(kept) != 0 {
				t.Fatalf("n=%d burst=%d period=%v rise=%v: a rise of %d slots or more keeps %d sends, want none", n, burst, period, rise, m, len(kept))
			}
			continue
		}
		// Exactly m of every stretch's slots, wherever the grid lies.
		if lost := total - len(kept); lost != 10*m {
			t.Fatalf("n=%d burst=%d period=%v rise=%v: %d of %d slots emptied, want %d of each %d", n, burst, period, rise, lost, total, m, per)
		}
	}
}

// A rise within the estimate's wobble, a rule that is not paced, or no
// rise at all empties nothing.
func TestVacatedLeavesSmallRisesAndOtherRulesAlone(t *testing.T) {
	paced := rule.Must(rule.New("p", 20, time.Second))
	window := rule.Must(rule.NewWindow("w", 20, time.Second))
	calendar := rule.Must(rule.NewCalendar("c", 20, rule.Day, time.UTC))
	at := time.Unix(1_800_000_000, 0) // the first slot of a period: vacated by any rise that counts
	if !vacated([]rule.Rule{paced}, at, headroomRebookRise) {
		t.Fatal("the first slot of a period stays under a rise of headroomRebookRise, want it emptied")
	}
	if vacated([]rule.Rule{paced}, at, headroomRebookRise-time.Millisecond) {
		t.Fatal("a rise under headroomRebookRise empties a slot")
	}
	if vacated([]rule.Rule{window, calendar}, at, time.Second) {
		t.Fatal("a window or calendar rule's slot is emptied")
	}
	if vacated([]rule.Rule{paced}, at.Add(100*time.Millisecond), 30*time.Millisecond) {
		t.Fatal("the third slot of a period is emptied by a rise of one slot's worth")
	}
}

// A request that wakes for its slot later than the allowance books again,
// and its lateness counts as a latency sample, so that a machine that stays
// that slow widens the allowance instead of sending every request back.
func TestALateWakeBooksAgainAndIsMeasured(t *testing.T) {
	h, _ := testHeadroom(t, "p")
	h.allowance.Store(int64(20 * time.Millisecond))
	c := &call{p: &profile{head: h, lowered: new(atomic.Int64)}, allowance: h.current()}
	var res limiter.Reservation
	if why := c.rebook(0, &res, time.Now().Add(-5*time.Millisecond)); why != "" {
		t.Fatalf("a wake 5 ms after the slot, within a 20 ms allowance, books again (%s)", why)
	}
	if _, n, _ := h.spread(time.Now()); n != 0 {
		t.Fatalf("a wake on time recorded %d samples, want none (its answer records one)", n)
	}
	if why := c.rebook(0, &res, time.Now().Add(-60*time.Millisecond)); why != "late" {
		t.Fatalf("a wake 60 ms after the slot, past a 20 ms allowance: %q, want late", why)
	}
	var got time.Duration
	for i := range h.samples {
		if v := h.samples[i].Load(); v != 0 {
			got = time.Duration(v&(1<<24-1)) * time.Microsecond
		}
	}
	if got < 60*time.Millisecond {
		t.Fatalf("the late wake recorded %v, want at least its 60 ms of lateness", got)
	}
	// A rule lowered while it waited comes first.
	c.p.lowered.Add(1)
	if why := c.rebook(0, &res, time.Now()); why != "lowered" {
		t.Fatalf("a request that waited across a lowered rule: %q, want lowered", why)
	}
}

// Where the preset fixed its Jitter, a wake later than it books again too;
// a profile with neither measures nothing and checks nothing.
func TestALateWakePastAFixedJitterBooksAgain(t *testing.T) {
	var res limiter.Reservation
	c := &call{p: &profile{Profile: providers.Profile{Jitter: 50 * time.Millisecond}, lowered: new(atomic.Int64)}}
	if why := c.rebook(0, &res, time.Now().Add(-10*time.Millisecond)); why != "" {
		t.Fatalf("a wake 10 ms late, within a 50 ms Jitter, books again (%s)", why)
	}
	if why := c.rebook(0, &res, time.Now().Add(-80*time.Millisecond)); why != "late" {
		t.Fatalf("a wake 80 ms late, past a 50 ms Jitter: %q, want late", why)
	}
	none := &call{p: &profile{lowered: new(atomic.Int64)}}
	if why := none.rebook(0, &res, time.Now().Add(-time.Second)); why != "" {
		t.Fatalf("a profile with no allowance books a late wake again (%s)", why)
	}
}
