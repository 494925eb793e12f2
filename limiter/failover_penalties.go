package limiter

import (
	"context"
	"errors"
	"time"
)

// Penalties during an outage: a penalty the primary does not take because
// it is away is kept here and written, and so announced, once it answers.

// penaltyID names a kept penalty: its group and scope.
type penaltyID struct{ group, scope string }

// maxPendingPenalties bounds the penalties kept for a primary that is away.
const maxPendingPenalties = 1024

// Penalize implements Limiter. The penalty is kept locally as well, so it
// holds through an outage. A penalty the primary does not take because it
// is away is kept (the latest end per scope) and written, and so announced,
// within about penaltyRetry of the primary answering again, unless it is
// over by then, or older than a reset the primary recorded meanwhile
// (ErrStalePenalty). Such a penalty returns nil.
func (f *failover) Penalize(ctx context.Context, group string, p Penalty) error {
	_, err := f.PenalizeStored(ctx, group, p)
	return err
}

// PenalizeStored is Penalize that also returns the value the primary
// stored, "" when it stored none (kept for an outage among them).
func (f *failover) PenalizeStored(ctx context.Context, group string, p Penalty) (string, error) {
	if err := f.local.Penalize(ctx, group, p); err != nil {
		return "", err
	}
	if f.down.Load() {
		f.keepPenalty(group, p)
		return "", nil
	}
	ctx, cancel := f.bound(ctx)
	defer cancel()
	var stored string
	var err error
	if sp, ok := f.primary.(interface {
		penalizeStored(context.Context, string, Penalty) (string, error)
	}); ok {
		stored, err = sp.penalizeStored(ctx, group, p)
	} else {
		err = f.primary.Penalize(ctx, group, p)
	}
	switch {
	case errors.Is(err, ErrUnavailable):
		f.keepPenalty(group, p)
	case errors.Is(err, ErrStalePenalty):
		// Older than a reset of its quota: kept, it would shut the scope
		// the reset opened during the next outage.
		f.local.forgetPenalty(group, p)
	}
	return stored, err
}

func (f *failover) keepPenalty(group string, p Penalty) {
	f.penMu.Lock()
	id := penaltyID{group, p.Scope}
	old, ok := f.penalties[id]
	switch {
	case ok:
		if p.supersedes(old) {
			f.penalties[id] = p
		}
		p = Penalty{}
	case len(f.penalties) < maxPendingPenalties:
		f.penalties[id] = p
		p = Penalty{}
	}
	f.penMu.Unlock()
	if p.Scope != "" && f.cfg.OnPenaltyLost != nil {
		f.cfg.OnPenaltyLost(group, p)
	}
	f.flushPenalties()
}

// flushPenalties writes the kept penalties to the primary in the
// background (one goroutine at a time; close stops and waits for it). It
// tries again every penaltyRetry until all are written, whether or not the
// failover uses the primary again yet and whatever this replica calls next:
// the breaker stops the penalised scope's requests before the limiter sees
// them, so waiting for a request's probe, or for Recover, could share the
// penalty late or never. Each write announces the penalty.
func (f *failover) flushPenalties() {
	f.penMu.Lock()
	defer f.penMu.Unlock()
	if f.flushing || len(f.penalties) == 0 {
		return
	}
	select {
	case <-f.stop:
		return // stopping: close may be waiting for bg already
	default:
	}
	f.flushing = true
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		for {
			// The penalties stay in the map while they are written, so
			// that a lift meanwhile drops them for good and a later end
			// replaces them; each leaves only once written as it was.
			f.penMu.Lock()
			if len(f.penalties) == 0 {
				f.flushing = false
				f.penMu.Unlock()
				return
			}
			batch := make(map[penaltyID]Penalty, len(f.penalties))
			for id, p := range f.penalties {
				batch[id] = p
			}
			f.penMu.Unlock()
			failed := false
			var written map[penaltyID]Penalty
			for id, p := range batch {
				if !f.stillKept(id, p) {
					continue // lifted, or replaced by a later end, meanwhile
				}
				if !p.Until.After(time.Now()) {
					f.forgetKept(id, p) // over already
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), max(f.cfg.Timeout, defaultTimeout))
				err := f.primary.Penalize(ctx, id.group, p)
				cancel()
				if errors.Is(err, ErrUnavailable) {
					failed = true // the primary did not answer this round
					break
				}
				f.forgetKept(id, p)
				if errors.Is(err, ErrStalePenalty) {
					// The provider reset its quota while Redis was
					// away: nothing to write, announce or keep.
					f.local.forgetPenalty(id.group, p)
					continue
				}
				if written == nil {
					written = make(map[penaltyID]Penalty)
				}
				written[id] = p
			}
			if len(written) > 0 && !f.announceAgain(written) {
				f.penMu.Lock()
				f.flushing = false
				f.penMu.Unlock()
				return
			}
			if failed {
				select {
				case <-f.stop:
					f.penMu.Lock()
					f.flushing = false
					f.penMu.Unlock()
					return
				case <-time.After(min(f.cfg.Probe, penaltyRetry)):
				}
			}
		}
	}()
}

// announceAgain announces the penalties just written once more after
// reannounceAfter: Redis answering again does not
// mean every replica has subscribed again, and an announcement missed while
// a replica reconnects is not replayed (the key still refuses its next
// reserve, but its requests already waiting for a slot would go out). It
// reports false when the failover is stopping.
func (f *failover) announceAgain(written map[penaltyID]Penalty) bool {
	select {
	case <-f.stop:
		return false
	case <-time.After(reannounceAfter):
	}
	a, ok := f.primary.(interface {
		announcePenalty(ctx context.Context, group string, p Penalty) error
	})
	if !ok {
		return true
	}
	for id, p := range written {
		if p.Until.After(time.Now()) {
			ctx, cancel := context.WithTimeout(context.Background(), max(f.cfg.Timeout, defaultTimeout))
			_ = a.announcePenalty(ctx, id.group, p)
			cancel()
		}
	}
	return true
}

// reannounceAfter is when a penalty written after an outage is announced
// again, for the replicas that were still resubscribing the first time.
const reannounceAfter = time.Second

// penaltyRetry bounds how long a penalty kept during an outage waits once
// the primary answers again.
const penaltyRetry = 250 * time.Millisecond

// stillKept reports whether p is still the penalty kept for id, read
// right before it is written: one lifted since the round began is not
// written back.
func (f *failover) stillKept(id penaltyID, p Penalty) bool {
	f.penMu.Lock()
	defer f.penMu.Unlock()
	return f.keptAsLocked(id, p)
}

// keptAsLocked reports whether p is the penalty kept for id; penMu held.
func (f *failover) keptAsLocked(id penaltyID, p Penalty) bool {
	cur, ok := f.penalties[id]
	return ok && cur.is(p)
}

// forgetKept drops the kept penalty id once p is written (or over), unless
// a later one replaced it meanwhile.
func (f *failover) forgetKept(id penaltyID, p Penalty) {
	f.penMu.Lock()
	if f.keptAsLocked(id, p) {
		delete(f.penalties, id)
	}
	f.penMu.Unlock()
}

// close stops retrying the kept penalties and waits for the background
// writes.
func (f *failover) close() {
	f.stopAsync()
	f.bg.Wait()
}

// stopAsync stops retrying the kept penalties without waiting for a write
// in progress (bounded by its own timeout).
func (f *failover) stopAsync() {
	f.stopOnce.Do(func() {
		// Under penMu: flushPenalties checks stop under it before bg.Add,
		// so no writer starts once close may be waiting for bg.
		f.penMu.Lock()
		close(f.stop)
		f.penMu.Unlock()
	})
}
