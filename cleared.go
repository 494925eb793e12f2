package throttle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/quotaware/throttle/providers"
)

// A provider's reset of its own quotas (providers.Verdict.Cleared, WeChat's
// clear_quota): the calendar windows it reset start again from zero and the
// penalties it ended are lifted, on every replica. Without it, a quota an
// operator cleared at noon stayed refused here until midnight.

// clearTimeout bounds each part of the work of one reset: its record for
// the other replicas, the counts, then the penalties.
const clearTimeout = 5 * time.Second

// conditionalLifter is a limiter that lifts a penalty only while it is the
// one read (limiter.Shared): a reset must not end a newer penalty.
type conditionalLifter interface {
	LiftPenaltyIf(ctx context.Context, group, scope string, seen *inspect.PenaltyState) (bool, error)
}

// resets remembers a profile's recent resets, so that an answer of the
// reset's code to a request sent before it, arriving after it, does not
// penalise the scope again until midnight. A second log of the same kind
// holds the lifts (profile.lifts, code ""), so that a reserve's reply that
// read a penalty before it was lifted does not open its breaker again for
// the penalty's whole length; the two apart, lifts never push a reset out,
// and a provider's answer after a lift still penalises. A request notes
// the count (seen) as it goes; an entry numbered above it came after.
// Reading takes no lock (the log is replaced whole), so a reset holds up no
// request, and noting costs a request one atomic load.
type resets struct {
	mu  sync.Mutex              // serialises add
	n   atomic.Uint64           // resets recorded so far
	log atomic.Pointer[[]reset] // the last maxResets, oldest first; read-only
}

type reset struct {
	seq    uint64   // 1 for the first
	code   string   // "" for a lift, which ends a penalty of any code
	scopes []string // sorted
}

// maxResets bounds the entries remembered: resets are rare (WeChat allows
// 10 a month), lifts an operator's or a reset's, and one only matters for
// the answers in flight when it came.
const maxResets = 64

// seen is what a request notes as it is sent.
func (r *resets) seen() uint64 { return r.n.Load() }

// add records a reset.
func (r *resets) add(c *providers.Cleared) { r.recordScopes(c.Code, c.Scopes) }

// lifted records the lift of scope's penalty, whatever its code.
func (r *resets) lifted(scope string) { r.record("", []string{scope}) }

// liftedAll records the lift of the penalties of scopes, whatever their
// code, in one entry: a reset of an account's every API would otherwise
// push the log's other entries out at once.
func (r *resets) liftedAll(scopes []string) { r.recordScopes("", scopes) }

// recordScopes adds an entry for a copy of scopes, sorted for ended.
func (r *resets) recordScopes(code string, scopes []string) {
	scopes = slices.Clone(scopes)
	slices.Sort(scopes)
	r.record(code, scopes)
}

// record adds an entry. The log is stored before the count, so a request
// that notes the new count finds the entry in the log.
func (r *resets) record(code string, scopes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var log []reset
	if old := r.log.Load(); old != nil {
		log = *old
	}
	if len(log) == maxResets {
		log = log[1:]
	}
	seq := r.n.Load() + 1
	log = append(slices.Clip(log), reset{seq: seq, code: code, scopes: scopes})
	r.log.Store(&log)
	r.n.Store(seq)
}

// ended reports whether a reset or a lift after seen (a request's note)
// ended a penalty of code on scope.
func (r *resets) ended(scope, code string, seen uint64) bool {
	if r.n.Load() == seen {
		return false // none since: the common case, no log read
	}
	log := r.log.Load()
	if len(*log) > 0 && (*log)[0].seq > seen+1 {
		// Entries since seen were pushed out of the log: one of them may
		// have ended it. Counted as ended, which costs a reserve asking
		// again, or a penalty not shared until the provider refuses again.
		return true
	}
	for i := len(*log) - 1; i >= 0 && (*log)[i].seq > seen; i-- {
		e := &(*log)[i]
		if _, ok := slices.BinarySearch(e.scopes, scope); ok && (e.code == code || e.code == "") {
			return true
		}
	}
	return false
}

// applyCleared ends what a reset ended before the caller gets the reset's
// answer, so that the caller's next call, on any replica, finds it done.
// Resets are rare (WeChat allows 10 a month), so the work stays on the
// request path, each part bounded by clearTimeout whatever the request's
// context: a caller that gives up on the answer must not leave the fleet
// half cleared. The reset is recorded for the other replicas first, then
// the counts go, so that a replica that hears of a lift finds them
// cleared, and then the penalties.
func (t *Transport) applyCleared(ctx context.Context, p *profile, c *providers.Cleared) {
	ctx = context.WithoutCancel(ctx)
	p.resets.add(c)
	var errs []error
	// For every replica, first: an answer from before the reset that
	// reaches another replica, even while the rest is done, penalises
	// nothing either (limiter.ResetRecorder).
	if rr, ok := t.limiter.(limiter.ResetRecorder); ok && len(c.Scopes) > 0 && c.Code != "" {
		rctx, cancel := context.WithTimeout(ctx, clearTimeout)
		if err := rr.RecordReset(rctx, p.Name, c.Code, c.Scopes); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	cleared := 0
	if cc, ok := t.limiter.(limiter.CalendarClearer); ok && len(c.Rules) > 0 {
		cctx, cancel := context.WithTimeout(ctx, clearTimeout)
		err := cc.ClearCalendar(cctx, p.Name, c.Rules)
		cancel()
		if err != nil {
			errs = append(errs, err)
		} else {
			cleared = len(c.Rules)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, clearTimeout)
	lifted, lerrs := t.liftCleared(lctx, p, c)
	cancel()
	errs = append(errs, lerrs...)
	if err := errors.Join(errs...); err != nil {
		t.tel.log.Warn("throttle: the provider reset its quotas, but not all of what it ended could be ended here; the rest ends when its window does",
			"provider", p.Name, "penalties_lifted", lifted, "counts_cleared", cleared, "error", err)
		return
	}
	t.tel.log.Info("throttle: the provider reset its quotas; the penalties and counts it reset end now",
		"provider", p.Name, "penalties_lifted", lifted, "counts_cleared", cleared)
}

// liftCleared lifts the penalties of c.Code on c.Scopes: the shared ones
// (each only while it is the one read) and this replica's own breakers.
func (t *Transport) liftCleared(ctx context.Context, p *profile, c *providers.Cleared) (lifted int, errs []error) {
	// First, as Transport.LiftPenalty does: a reserve's reply that read a
	// penalty before the lifts below, arriving after them, asks again
	// rather than open the breaker for the penalty's whole length.
	p.lifts.liftedAll(c.Scopes)
	done := map[string]bool{}
	plain, _ := t.limiter.(limiter.PenaltyLifter)
	if r, ok := t.limiter.(limiter.PenaltyReader); ok {
		states, err := r.Penalties(ctx, p.Name, c.Scopes)
		if err != nil {
			errs = append(errs, err)
		}
		for i := range states {
			ps := &states[i]
			if ps.Code != c.Code {
				continue
			}
			done[ps.Scope] = true
			var err error
			if cl, ok := t.limiter.(conditionalLifter); ok && ps.Value != "" {
				_, err = cl.LiftPenaltyIf(ctx, p.Name, ps.Scope, ps)
			} else if plain != nil {
				_, err = plain.LiftPenalty(ctx, p.Name, ps.Scope)
			}
			switch {
			case errors.Is(err, limiter.ErrPenaltyChanged):
				continue // a penalty recorded since the reset stands
			case errors.Is(err, limiter.ErrNotAnnounced):
				errs = append(errs, err) // gone, but the others keep their breakers
			case err != nil:
				errs = append(errs, err) // the key stays: so does the breaker
				continue
			}
			p.breakers.Lift(ps.Scope)
			lifted++
		}
	}
	// Penalties this replica holds that Redis does not (a write that
	// failed, an outage): the lift also tells the other replicas.
	set := make(map[string]bool, len(c.Scopes))
	for _, sc := range c.Scopes {
		set[sc] = true
	}
	// Redis holds no penalty of c.Code there, as read (liftUnlessHeld).
	for _, scope := range p.breakers.Scopes(func(scope, code string) bool { return code == c.Code && set[scope] && !done[scope] }) {
		if err := liftUnlessHeld(ctx, t.limiter, p.Name, scope); err != nil {
			errs = append(errs, err)
		}
		// The reset ended this replica's penalty of its code whatever
		// Redis holds; after the remote lift, as Transport.LiftPenalty
		// does: a confirmation read before it may have opened the breaker.
		p.breakers.Lift(scope)
		lifted++
	}
	return lifted, errs
}

// liftUnlessHeld ends this replica's copy of the penalty on scope, and the
// shared one only while Redis holds no penalty there at all, as read
// atomically with the lift: a penalty of another code, or one recorded
// since (a call sent after a reset), stands, and this replica's next
// reserve meets it.
func liftUnlessHeld(ctx context.Context, lim limiter.Limiter, group, scope string) error {
	return liftIfStill(ctx, lim, group, scope, nil)
}

// liftIfStill lifts the penalty on scope only while Redis holds seen (nil:
// no penalty at all), as LiftPenaltyIf does; anything else there stands.
// When Redis cannot be asked (an outage), the plain lift drops the copy
// kept for the outage all the same, which would otherwise shut the scope
// on this replica and be written to the fleet once Redis is back. A
// limiter that cannot compare lifts plainly.
func liftIfStill(ctx context.Context, lim limiter.Limiter, group, scope string, seen *inspect.PenaltyState) error {
	var err error
	if cl, ok := lim.(conditionalLifter); ok {
		_, err = cl.LiftPenaltyIf(ctx, group, scope, seen)
		switch {
		case err == nil || errors.Is(err, limiter.ErrPenaltyChanged):
			return nil
		case errors.Is(err, limiter.ErrNotAnnounced):
			// Lifted, but not announced: a plain lift now could remove a
			// penalty recorded since.
			return err
		}
	}
	if plain, ok := lim.(limiter.PenaltyLifter); ok {
		_, err = plain.LiftPenalty(ctx, group, scope)
	}
	return err
}

// penalizeStored records p, and returns the value the limiter stored when
// it can say (limiter.StoredPenalizer), else "".
func penalizeStored(ctx context.Context, lim limiter.Limiter, group string, p limiter.Penalty) (string, error) {
	if sp, ok := lim.(limiter.StoredPenalizer); ok {
		return sp.PenalizeStored(ctx, group, p)
	}
	return "", lim.Penalize(ctx, group, p)
}

// liftWritten lifts the penalty a write stored when a provider's reset of
// its code came while it wrote. The reset records itself, then reads the
// penalties and lifts those of its code; a write that landed after that
// read (a call sent within a round trip of the reset counts as after it in
// penalize.lua; a record that failed) would shut the scope for the fleet
// until the penalty's end. So the write lifts what it stored, and only
// that: a penalty of another code, or one recorded since, stands.
// Residuals, each needing such a late write and more: a later call's
// penalty with the same end and code stores the same value and goes with
// it (every 45009 ends at midnight), and a shorter penalty the write
// replaced (Redis keeps the longer of two) is gone with it, both back at
// the scope's next refusal; a write whose reply was lost (a timeout)
// stored nothing as far as it knows, and its penalty stays. Nothing stored
// (kept for an outage, or a penalty ending no earlier was there) lifts
// only while Redis holds no penalty (liftUnlessHeld); a limiter that
// cannot say what it stored lifts plainly.
func liftWritten(ctx context.Context, lim limiter.Limiter, group, scope, stored string) error {
	if _, ok := lim.(limiter.StoredPenalizer); !ok {
		if plain, ok := lim.(limiter.PenaltyLifter); ok {
			_, err := plain.LiftPenalty(ctx, group, scope)
			return err
		}
		return nil
	}
	var seen *inspect.PenaltyState // nothing stored: only while Redis holds none
	if stored != "" {
		seen = &inspect.PenaltyState{Scope: scope, Value: stored}
	}
	return liftIfStill(ctx, lim, group, scope, seen)
}
