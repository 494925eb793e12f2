package limiter

import (
	"strconv"
	"strings"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// Sliding-window rules: at most Limit requests in any window of length
// Period, exactly, with a burst admitted as soon as the window has room.
//
// The state is a log of the send times booked for the rule, oldest first,
// kept as groups (latest send time, count). A new send takes the earliest
// slot that is not before the latest one booked (slots are handed out in
// arrival order, as with a paced rule) and a full Period after the
// Limit-th most recent send: then no window of length Period holds more
// than Limit. Groups a Period old can never bind again and are dropped.
//
// A group stands for all its sends at its latest time, which may only make
// a send wait longer, never shorter: the log never over-admits. For a limit
// up to rulecore.WindowExactLimit a group holds sends of one microsecond (the log is
// exact); above it, sends of one resolution bucket (Period/rulecore.WindowBuckets)
// share a group, so a send may wait up to one bucket longer than an exact
// log would. At most windowMaxGroups groups are kept whatever the traffic:
// beyond that the two oldest merge, which again can only delay. That bounds
// a key's size by the number of groups, independent of the limit and of
// the traffic (see BenchmarkWindowKeyBytes).
//
// The Redis script (the 'w' section of reserve.lua) and Memory run the same
// steps on the same state.

const (
	// windowMaxGroups bounds the groups of one key.
	windowMaxGroups = 128
)

// appendWindowArgs appends a window rule's script arguments: 'w', limit,
// period (µs), resolution (µs). The key's expiry follows from its state.
func appendWindowArgs(list []any, r *rulecore.Rule) []any {
	return append(list, boxedWindow, boxInt64(r.Limit), r.ArgT, r.ArgTol)
}

// windowLog is a window rule's state in Memory: groups of send times,
// oldest first.
type windowLog struct {
	periodUs int64
	at       []int64 // the latest send time of each group, µs, ascending
	n        []int64 // how many sends each group holds
}

// trim drops the groups that can no longer bind: a Period or more before now.
func (w *windowLog) trim(now int64) {
	k := 0
	for k < len(w.at) && w.at[k] <= now-w.periodUs {
		k++
	}
	if k > 0 {
		w.at = append(w.at[:0], w.at[k:]...)
		w.n = append(w.n[:0], w.n[k:]...)
	}
}

// earliest is the earliest slot the rule allows a new send: not before the
// latest booked, and a Period after the limit-th most recent. Zero when the
// log is empty.
func (w *windowLog) earliest(limit int64) int64 {
	if len(w.at) == 0 {
		return 0
	}
	latest := w.at[len(w.at)-1]
	var sum int64
	for i := len(w.at) - 1; i >= 0; i-- {
		if sum += w.n[i]; sum >= limit {
			return max(latest, w.at[i]+w.periodUs)
		}
	}
	return latest
}

// book records a send at s, which is not before the latest booked.
func (w *windowLog) book(s, resolutionUs int64) {
	if k := len(w.at) - 1; k >= 0 && w.at[k]/resolutionUs == s/resolutionUs {
		w.at[k] = s
		w.n[k]++
		return
	}
	w.at = append(w.at, s)
	w.n = append(w.n, 1)
	if len(w.at) > windowMaxGroups {
		// The oldest group's sends count at the next one's time: later,
		// so the merge can only delay.
		w.n[1] += w.n[0]
		w.at = append(w.at[:0], w.at[1:]...)
		w.n = append(w.n[:0], w.n[1:]...)
	}
}

// cancel gives back a send booked at s if it is the latest booked: a send
// with another booked after it is kept (the later one was placed counting
// it).
func (w *windowLog) cancel(s int64) {
	k := len(w.at) - 1
	if k < 0 || w.at[k] != s {
		return
	}
	if w.n[k]--; w.n[k] == 0 {
		w.at, w.n = w.at[:k], w.n[:k]
	}
}

// expiry is when the log stops binding: a Period after its latest send.
func (w *windowLog) expiry() int64 {
	if len(w.at) == 0 {
		return 0
	}
	return w.at[len(w.at)-1] + w.periodUs
}

// parseWindowLog reads a window rule's key as reserve.lua writes it
// ("<latest µs>:<count> <µs after the previous>:<count> ..."): how many
// sends it holds and the latest one. ok is false for anything else (a
// paced rule's single number).
func parseWindowLog(v string) (sends, latest int64, ok bool) {
	if !strings.Contains(v, ":") {
		return 0, 0, false
	}
	for _, g := range strings.Fields(v) {
		d, c, found := strings.Cut(g, ":")
		dt, err1 := strconv.ParseInt(d, 10, 64)
		n, err2 := strconv.ParseInt(c, 10, 64)
		if !found || err1 != nil || err2 != nil {
			return 0, 0, false
		}
		latest += dt
		sends += n
	}
	return sends, latest, true
}
