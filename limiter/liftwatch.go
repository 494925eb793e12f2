package limiter

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lifts a replica would miss: the penalties it knows are re-read while
// Redis refuses its subscription and after each resubscription (a lift
// announced in between reached no one here), and its own lifts are kept a
// moment so that a confirmation that read the key before does not undo
// them.

// remember notes a penalty this replica met, to re-read while announcements
// are unavailable.
func (w *watcher) remember(group string, p Penalty) {
	w.knownMu.Lock()
	defer w.knownMu.Unlock()
	id := penaltyID{group, p.Scope}
	if _, ok := w.known[id]; !ok && len(w.known) >= maxKnown {
		now := time.Now()
		for k, until := range w.known {
			if !until.After(now) {
				delete(w.known, k)
			}
		}
		if len(w.known) >= maxKnown {
			return
		}
	}
	if p.Until.After(w.known[id]) {
		w.known[id] = p.Until
	}
}

// poll re-reads the known penalties while the subscription is refused, so
// that a lift (its key gone) still reaches onLift within about pollEvery,
// and once each time the subscription is made again, for the lifts
// announced while it was not in place.
func (w *watcher) poll() {
	defer w.done.Done()
	t := time.NewTimer(pollEvery)
	defer t.Stop()
	// owed is a pass asked for after a resubscription that has not yet
	// had every key answered: right after a blip the pool dials again,
	// and a pass that times out would leave a missed lift unheard until
	// the penalty's end.
	owed := false
	for {
		select {
		case <-w.quit:
			return
		case <-w.recheck:
			owed = true
		case <-t.C:
			t.Reset(pollEvery)
			if !owed && !w.refused.Load() {
				continue
			}
		}
		w.knownMu.Lock()
		now := time.Now()
		ids := make([]penaltyID, 0, len(w.known))
		ends := make([]time.Time, 0, len(w.known))
		for id, until := range w.known {
			if !until.After(now) {
				delete(w.known, id)
				continue
			}
			ids, ends = append(ids, id), append(ends, until)
		}
		w.knownMu.Unlock()
		if len(ids) == 0 {
			owed = false
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
		pipe := w.l.client.Pipeline()
		cmds := make([]*redis.IntCmd, len(ids))
		for i, id := range ids {
			// The penalty's key, and the mark a lift leaves (lift.go):
			// a key gone without its mark went with a lost state.
			cmds[i] = pipe.Exists(ctx, w.l.penaltyKey(id.group, id.scope))
		}
		marks := make([]*redis.IntCmd, len(ids))
		for i, id := range ids {
			marks[i] = pipe.Exists(ctx, w.l.markKey(id.group, id.scope))
		}
		_, _ = pipe.Exec(ctx)
		cancel()
		owed = false
		for i, id := range ids {
			n, err := cmds[i].Result()
			m, merr := marks[i].Result()
			if err != nil || merr != nil {
				owed = true // asked again in pollEvery
				continue
			}
			if n != 0 || m == 0 || !w.forgetUnlessRenewed(id, ends[i]) {
				continue
			}
			if w.cfg.onLift != nil {
				w.cfg.onLift(id.group, id.scope)
			}
		}
	}
}

// knownEnd is the end of id's known penalty, zero for none.
func (w *watcher) knownEnd(id penaltyID) time.Time {
	w.knownMu.Lock()
	defer w.knownMu.Unlock()
	return w.known[id]
}

// forgetUnlessRenewed forgets id's known penalty, whose key a read found
// gone, and reports true; unless a penalty ending after end, the known
// one when the read was sent, was remembered since: recorded by this
// replica while the read was in flight, it stands, and passing the lift
// on would close its scope's breaker and drop its copy kept for outages.
func (w *watcher) forgetUnlessRenewed(id penaltyID, end time.Time) bool {
	w.knownMu.Lock()
	defer w.knownMu.Unlock()
	if w.known[id].After(end) {
		return false
	}
	delete(w.known, id)
	return true
}

// lifted records that this replica lifted a penalty, its key gone now.
func (w *watcher) lifted(group, scope string) {
	if w == nil {
		return
	}
	now := time.Now()
	w.liftMu.Lock()
	defer w.liftMu.Unlock()
	for id, at := range w.liftedAt {
		if now.Sub(at) > time.Second { // past every confirmation read sent before
			delete(w.liftedAt, id)
		}
	}
	w.liftedAt[penaltyID{group, scope}] = now
}

// liftedSince reports whether this replica lifted id's penalty after t.
func (w *watcher) liftedSince(id penaltyID, t time.Time) bool {
	w.liftMu.Lock()
	defer w.liftMu.Unlock()
	at, ok := w.liftedAt[id]
	return ok && at.After(t)
}
