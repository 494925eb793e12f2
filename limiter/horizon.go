package limiter

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// The horizon: how far ahead Redis has booked, as this replica last saw it,
// from its own slots and from the rules' state in every answer, refusals
// included. At the switch to local limits the local slots start one period
// past it (see failover.go), so a replica whose requests were all refused
// does not send into the windows the others' Redis slots still fill.

// noteHorizon keeps the latest slot the primary has booked, for this
// replica or, as far as this answer shows, for any (see fleetHorizon), and
// the hold of each long window rule: a replica whose requests were all
// refused learns from the refusals alone how far ahead the others booked.
func (f *failover) noteHorizon(req Request, res Reservation) {
	// The answer's times are on the primary's clock; the holds on this
	// replica's (the local limiter reads them). Redis's answers carry when
	// they arrived; an outside limiter's are read now.
	var skew int64
	if !res.now.IsZero() {
		local := res.answered
		if local.IsZero() {
			local = time.Now()
		}
		skew = int64(skewBeyondBound(res.now, local) / time.Microsecond)
	}
	if f.skew.Load() != skew {
		f.skew.Store(skew) // written only on a change: every reserve reads it
	}
	at := fleetHorizon(&req, &res)
	if at > 0 {
		at -= skew
	}
	for i := range req.Rules {
		// Evenly paced rules, and window rules no longer than maxHold
		// (longer ones have holds of their own, windowHolds): a window's
		// share may go in one burst, which must not meet Redis's last
		// sends, or, on the way back, Redis's first sends meet the local
		// burst, inside one window. (An answer without the rules' states,
		// an outside limiter's, counts as well.)
		r := core(&req.Rules[i])
		if r.Kind == rulecore.Paced && r.Burst == 1 || r.Kind == rulecore.Window && r.Period <= maxHold {
			if p := int64(min(r.Period, maxHold) / time.Microsecond); p > f.period.Load() {
				f.period.Store(p) // racy max: any recent value will do
			}
		}
	}
	var buf [4]int64
	states := res.states(buf[:0], len(req.Rules))
	for old := f.lastSlot.Load(); at > old && !f.lastSlot.CompareAndSwap(old, at); old = f.lastSlot.Load() {
	}
	if f.down.Load() {
		// A reply to a call made before the switch (a batch in flight
		// when another call timed out) still holds the local slots back
		// past what it booked: drainUntil was set at the switch.
		d := at + f.period.Load()
		for old := f.drainUntil.Load(); d > old && !f.drainUntil.CompareAndSwap(old, d); old = f.drainUntil.Load() {
		}
	}
	if states != nil {
		for i := range req.Rules {
			if r := core(&req.Rules[i]); r.Kind == rulecore.Window && r.Period > maxHold && states[i] > 0 {
				f.noteWindow(req.Group, r, min(states[i], fleetCap(&res))-skew+int64(r.Period/time.Microsecond))
			}
		}
	}
}

// maxFleetAhead bounds how far past an answer's time (on the store's clock)
// another replica's slot counts toward the horizon. The horizon holds back
// every local slot of the replica at a switch, and after a lost state
// every new one, whatever their group: a rule's state far ahead (a key
// left by a rule that once allowed 1 an hour, one written by hand, 10^17
// µs) would have held them all back for as long, until the process
// restarted. A slot another replica booked more than a minute ahead is a
// request with an unusually long deadline; the local share may meet it.
const maxFleetAhead = time.Minute

// fleetCap is the latest state (µs) of res that counts toward the horizon:
// maxFleetAhead past the answer's time, or no bound for an answer that
// carries none.
func fleetCap(res *Reservation) int64 {
	if res.now.IsZero() {
		return math.MaxInt64
	}
	return res.now.UnixMicro() + int64(maxFleetAhead/time.Microsecond)
}

// fleetHorizon is the latest slot (µs) res shows booked: its own slot, and
// an evenly paced rule's latest slot whoever booked it (its state after
// booking is that slot plus one interval; a rule with a burst runs its state
// ahead of the real sends, so only its own slot counts). A refusal from Redis
// carries the rules' state as well (reserve.lua, one.lua): the paced rules'
// latest slots and the window rules' latest sends.
func fleetHorizon(req *Request, res *Reservation) (at int64) {
	if res.ok {
		at = res.SendAt().UnixMicro()
	}
	var buf [4]int64
	states := res.states(buf[:0], len(req.Rules))
	if states == nil {
		return at
	}
	var fleet int64
	for i := range req.Rules {
		switch r := core(&req.Rules[i]); {
		case r.Kind == rulecore.Paced && r.Burst == 1:
			fleet = max(fleet, states[i]-r.IntervalUs)
		case r.Kind == rulecore.Window && !res.ok:
			// An admitted send is at or after the window's latest.
			fleet = max(fleet, states[i])
		}
	}
	return max(at, min(fleet, fleetCap(res)))
}

// maxWindowHolds bounds windowHolds; past it, holds already over are
// dropped, and a new one is not kept when none is.
const maxWindowHolds = 4096

func (f *failover) noteWindow(group string, r *rulecore.Rule, hold int64) {
	id := group + "\x00" + r.Key
	f.windowMu.Lock()
	defer f.windowMu.Unlock()
	if f.windowHolds == nil {
		f.windowHolds = make(map[string]int64)
	}
	if _, ok := f.windowHolds[id]; !ok && len(f.windowHolds) >= maxWindowHolds {
		now := time.Now().UnixMicro()
		for k, h := range f.windowHolds {
			if h <= now {
				delete(f.windowHolds, k)
			}
		}
		if len(f.windowHolds) >= maxWindowHolds {
			return
		}
	}
	if hold > f.windowHolds[id] {
		f.windowHolds[id] = hold
	}
}

// windowHold is when the local share of req's window rules may start.
func (f *failover) windowHold(req *Request) (hold int64) {
	for i := range req.Rules {
		if r := core(&req.Rules[i]); r.Kind == rulecore.Window && r.Period > maxHold {
			f.windowMu.Lock()
			hold = max(hold, f.windowHolds[req.Group+"\x00"+r.Key])
			f.windowMu.Unlock()
		}
	}
	return hold
}

// withFleet records fleet, a refusal's states of the rules, in res.
func (res *Reservation) withFleet(fleet string) *Reservation {
	res.fleet = fleet
	return res
}

// states returns the state of each of the n rules that res carries (the
// booked ones of a slot, what the fleet booked for a refusal from Redis),
// appended to buf, or nil when it carries none for n rules.
func (res *Reservation) states(buf []int64, n int) []int64 {
	if res.ok {
		if len(res.booked) == n {
			return res.booked
		}
		return nil
	}
	rest := res.fleet
	for range n {
		if rest == "" {
			return nil
		}
		var field string
		field, rest, _ = strings.Cut(rest, " ")
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return nil
		}
		buf = append(buf, v)
	}
	return buf
}
