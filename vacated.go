package throttle

import (
	"time"

	"github.com/quotaware/throttle/limiter/rule"
)

// vacated reports whether a request waiting for the slot at (on the
// limiter's clock), booked under rules paced for an allowance smaller by
// rise than the one now in force, must leave its slot empty and book
// again.
//
// Under excess demand a paced rule's slots lie T = Interval apart, n = Period/T
// of them to a Period, and Period already holds the allowance they were
// booked under. A provider's wall-clock window then takes the sends of a
// span longer by the rise: up to m = ceil(rise/T) sends too many. So in
// every stretch of n·T aligned on the Unix epoch, the slots in its first
// m·T stay empty: the slots repeat from one stretch to the next, so any
// span of n·T holds exactly m of them wherever it starts, and a span of
// n·T+rise at most m more slots, so the sends left stay within the limit.
// Every replica decides its own slots from the limiter's clock alone, with
// no word to the others. The cost is m of every n slots booked before the
// rise (1 of 20 for DingTalk's 20/s and a rise under 50 ms), where booking
// every waiting request again emptied them all: slots given back out of
// order are lost, and the requests booked again land behind the whole
// queue, mostly past their budget (48.8% of the rate over the 4 s after a
// rise from 0-10 ms to 0-40 ms of latency, 93.8-95% now).
//
// What it does not cover: the junction of the queue booked before the
// rise with the bookings after it (which follow the last old slot at the
// new pace, with no gap of the rise between them), a replica that applies
// the rise up to a round of the loop after another, and the slots a
// replica's own share grants during an outage (paced by the share, not the
// rule). Each can put one send too many into one window when the latency
// meets its extremes there.
func vacated(rules []rule.Rule, at time.Time, rise time.Duration) bool {
	if rise < headroomRebookRise {
		return false
	}
	ns := at.UnixNano()
	for _, r := range rules {
		t := int64(r.Interval())
		if t <= 0 {
			continue
		}
		n := (int64(r.Period()) + t - 1) / t
		m := (int64(rise) + t - 1) / t
		if m >= n || ns%(n*t) < m*t {
			return true
		}
	}
	return false
}
