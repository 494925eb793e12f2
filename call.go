package throttle

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/internal/circuit"
	"github.com/quotaware/throttle/internal/tokens"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"go.opentelemetry.io/otel/attribute"
)

// call is one RoundTrip of a matched request, across its attempts.
type call struct {
	t     *Transport
	p     *profile
	route providers.Route
	// allowance is the measured latency allowance read before route was
	// built: slots booked on its rules under a wider one since may have to
	// stay empty (vacated).
	allowance    time.Duration
	start        time.Time
	resetsAtSend uint64    // the profile's resets when the last attempt went out (resets.seen)
	sent         time.Time // when the last attempt went out

	attempts int
	probe    func(circuit.Outcome) // the breakers' done for the attempt sent; nil before the send
	waited   time.Duration
	outcome  string
	shared   bool // a token exchange answered from Redis after the limiter
	verdict  providers.Verdict
	events   []spanEvent

	// From httptrace (traceWrites): whether the last attempt's request
	// was written, and whether the base transport reported its work at
	// all; tracing is set when every attempt carries the trace (the
	// retrier's, for requests that are not idempotent).
	wrote   atomic.Bool
	traced  atomic.Bool
	tracing bool
}

// traceWrites returns ctx with a trace that records, for c's attempt,
// whether the base transport reported its work (GetConn, as net/http's
// does) and whether it wrote the request.
func (c *call) traceWrites(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn:      func(string) { c.traced.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { c.wrote.Store(true) },
	})
}

// unwritten reports whether the attempt that failed with err never wrote
// its request: its trace (traced) says so, or err is a failure to resolve
// or reach the host (a base that reports nothing, or an attempt without
// the trace).
func (c *call) unwritten(err error, traced bool) bool {
	if traced && c.traced.Load() {
		return !c.wrote.Load()
	}
	var dns *net.DNSError
	var op *net.OpError
	return errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
}

// budget is how long the call may still wait: the smaller of the time left
// of WithMaxWait since the call started and of the context deadline.
func (c *call) budget(ctx context.Context) time.Duration {
	b := c.t.maxWait - time.Since(c.start)
	if dl, ok := ctx.Deadline(); ok {
		b = min(b, time.Until(dl))
	}
	return max(b, 0)
}

// attempt reserves a slot, waits for it, sends once and reads the verdict.
func (c *call) attempt(req *http.Request) (*http.Response, error) {
	c.attempts++
	c.verdict, c.shared = providers.Verdict{}, false
	if err := req.Context().Err(); err != nil {
		// The caller gave up before this attempt: nothing to reserve.
		closeBody(req)
		c.outcome = outcomeCancelled
		return nil, err
	}
	// Local breakers first: a scope known to be penalised costs no I/O.
	// A scope whose penalty is over is probed by the first request sent
	// (sendable), not the first to reserve: a probe taken here held the
	// scope shut while it waited for its slot.
	if pe := c.openScope(); pe != nil {
		closeBody(req)
		c.outcome = outcomePenalized
		return nil, pe
	}
	if oe, answered := c.p.breakers.Probing(c.route.Scopes); answered != nil {
		// Another request probes a scope whose penalty is over: this
		// one waits for the answer before it books anything (booked,
		// its slots on every rule would be held while it waits).
		if !c.awaitProbe(req.Context(), answered) {
			closeBody(req)
			if err := req.Context().Err(); err != nil {
				c.outcome = outcomeCancelled
				return nil, err
			}
			c.outcome = outcomePenalized
			return nil, c.penaltyError(oe.Scope, oe.Until, oe.Code)
		}
		if pe := c.openScope(); pe != nil {
			closeBody(req)
			c.outcome = outcomePenalized
			return nil, pe
		}
	}
	c.probe = nil
	resp, err := c.reserveAndSend(req)
	if done := c.probe; done != nil {
		switch {
		case err != nil:
			done(circuit.Ignored)
		case c.verdict.Kind == providers.OK:
			done(circuit.Success)
		default:
			// A quota verdict was reported through Penalize already.
			done(circuit.Ignored)
		}
	}
	return resp, err
}

// onProbeWait, when set (by tests), is called as a request starts waiting
// for another's probe.
var onProbeWait atomic.Pointer[func()]

// sendable asks the breakers to send the attempt now, as its slot has
// come: a scope penalised meanwhile refuses it; a scope whose penalty is
// over makes it the scope's probe. The breakers' done is kept in c.probe
// for the outcome. When another request probes the scope (it began after
// this one booked), this one waits for the probe's answer within its
// budget and then books again (again): sent on the slots they booked,
// every request that waited would go at once when the answer came, off
// the rules' pace, and past a limit the answer may have stated.
func (c *call) sendable(ctx context.Context) (pe *PenaltyError, again bool) {
	for tries := 0; ; tries++ {
		done, err := c.p.breakers.Allow(c.route.Scopes)
		if err == nil {
			c.probe = done
			return nil, false
		}
		var oe *circuit.OpenError
		if !errors.As(err, &oe) {
			return c.penaltyError("", time.Time{}, ""), false
		}
		if !oe.Probing {
			return c.penaltyError(oe.Scope, oe.Until, oe.Code), false
		}
		_, answered := c.p.breakers.Probing(c.route.Scopes)
		if answered == nil {
			// Answered as this request asked, or taken a moment before
			// its channel was set: ask again, a few times.
			if tries < 3 {
				runtime.Gosched()
				continue
			}
			return c.penaltyError(oe.Scope, oe.Until, oe.Code), false
		}
		if !c.awaitProbe(ctx, answered) {
			return c.penaltyError(oe.Scope, oe.Until, oe.Code), false
		}
		return nil, true
	}
}

// awaitProbe waits for the answer of a probe in flight (answered), within
// the call's budget; it reports false when the budget or ctx ran out
// first.
func (c *call) awaitProbe(ctx context.Context, answered <-chan struct{}) bool {
	budget := c.budget(ctx)
	if budget <= 0 {
		return false
	}
	if f := onProbeWait.Load(); f != nil {
		(*f)()
	}
	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case <-answered:
		return true
	case <-timer.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (c *call) reserveAndSend(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
rebooked:
	gen := c.p.lowered.Load()
	lreq := limiter.Request{Group: c.p.Name, Rules: c.route.Rules, Scopes: c.route.Scopes, MaxWait: c.budget(ctx)}
	res, err := c.reserve(ctx, &lreq)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	if res.Delay() <= 0 && ctx.Err() != nil {
		// The caller gave up as the limiter answered: nothing will be
		// sent, so the slot goes back (Wait gives back a later one).
		c.giveBack(ctx, res)
		closeBody(req)
		c.outcome = outcomeCancelled
		return nil, ctx.Err()
	}
	if d := res.Delay(); d > 0 {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Add(d).Before(dl) {
			// The limiter's call took part of the budget it was given (a
			// slow round trip, a Redis that failed before the local
			// fallback): the slot lies past the deadline. Refused at
			// once, as x/time/rate's Wait does, not after sleeping to the
			// deadline.
			c.giveBack(ctx, res)
			closeBody(req)
			c.outcome = outcomeThrottled
			return nil, c.throttled(&lreq, res, d)
		}
	}
	var slot time.Time // when the slot was booked for: latency is measured from it
	if c.p.head != nil || c.p.Jitter > 0 {
		slot = time.Now().Add(res.Delay())
	}
	if d := res.Delay(); d > 0 {
		if err := res.Wait(ctx); err != nil {
			// The slot will not be used: give it back so the next caller
			// can have it.
			c.giveBack(ctx, res)
			closeBody(req)
			c.outcome = outcomeCancelled
			return nil, contextError(ctx, err)
		}
		c.waited += d
		// A rule was made stricter while this request waited (a limit the
		// provider stated, learned.go), or the latency allowance widened
		// and this slot is one of those the old pace must leave empty
		// (headroom.go, vacated): it books again under the new rules.
		// Or this process woke for the slot later than the allowance (a
		// stall: a pause of the process or its machine): sent now, it
		// would crowd the provider's window with the slots after it.
		if why := c.rebook(gen, &res, slot); why != "" {
			c.bookAgain(ctx, req, res, why)
			goto rebooked
		}
	}
	// A quota error may have come back while this request waited: a slot
	// booked before it must not be spent inside the penalty. Or the
	// penalty is over, and this request probes the scope.
	pe, again := c.sendable(ctx)
	if pe != nil {
		c.giveBack(ctx, res)
		closeBody(req)
		if ctx.Err() != nil {
			c.outcome = outcomeCancelled
			return nil, ctx.Err()
		}
		c.outcome = outcomePenalized
		return nil, pe
	}
	if again {
		c.bookAgain(ctx, req, res, "probed")
		goto rebooked
	}
	var unsent *atomic.Bool
	if c.t.tokens != nil && tokens.IsExchange(req) {
		// A token exchange may end without sending (answered from Redis
		// after all, or given up waiting for another replica's fetch):
		// its slot then goes back.
		var wctx context.Context
		wctx, unsent = tokens.WatchSent(ctx)
		req = req.WithContext(wctx)
	}
	traced := c.tracing
	if !traced && hasCalendar(c.route.Rules) {
		// A failure before the write gives a day's or a month's slot
		// back (below): only the trace tells it apart, at three
		// allocations, so only where a slot is worth that.
		req = req.WithContext(c.traceWrites(req.Context()))
		traced = true
	}
	c.resetsAtSend, c.sent = c.p.resets.seen(), time.Now()
	resp, err := c.t.base.RoundTrip(req)
	sentNothing := unsent != nil && unsent.Load()
	if sentNothing {
		c.giveBack(ctx, res)
		c.shared = err == nil
		if err != nil {
			if ctx.Err() != nil {
				c.outcome = outcomeCancelled
				return nil, err
			}
			// Past its budget waiting for another replica's fetch.
			c.outcome = outcomeThrottled
			return nil, c.t.exchangeWaitError(c.p.Name, c.route.API, err)
		}
	}
	// An answer from Redis is no measure of the provider's latency.
	if c.p.head != nil && err == nil && !sentNothing {
		c.p.head.observe(slot)
	}
	if hasConcurrency(c.route.Rules) {
		// The answer is here (or never will be): end the in-flight lease,
		// off the request path.
		// Copies, so that only this branch moves them to the heap.
		rs := res
		c.t.bg.do(ctx, func(ctx context.Context) error { return rs.Release(ctx) }, nil)
	}
	if err != nil {
		// A token exchange whose caller gave up may still go out: the
		// Sharer fetches a rotating one for the fleet whatever the caller
		// does, and tells (unsent) only of one that sent nothing. Its slot
		// stays, the trace of the caller's attempt says nothing of it.
		detached := unsent != nil && ctx.Err() != nil
		if !sentNothing && !detached && c.unwritten(err, traced) {
			// The provider saw nothing: its quota counted nothing, and
			// neither may the rules.
			c.giveBackNow(ctx, res.Cancel)
		}
		c.outcome = outcomeTransportError
		return nil, err
	}
	if c.p.Classify != nil {
		c.verdict = c.p.Classify(req, resp, &c.route)
	}
	c.outcome = outcomeFor(c.verdict.Kind, c.waited > 0)
	if c.verdict.Unbilled && !sentNothing && hasCalendar(c.route.Rules) {
		// Refused without billing a day or a month: those slots go back.
		c.giveBackNow(ctx, res.CancelCalendar)
	}
	switch {
	case c.verdict.Kind == providers.Quota:
		c.penalize(ctx)
	case c.verdict.Cleared != nil && c.verdict.Kind == providers.OK:
		c.t.applyCleared(ctx, c.p, c.verdict.Cleared)
	}
	return resp, nil
}

// bookAgain gives res back and routes req again, under the rules and the
// allowance in force now (a route that cannot be built keeps the one it
// had), for a request that books again; why is the span event's reason.
func (c *call) bookAgain(ctx context.Context, req *http.Request, res limiter.Reservation, why string) {
	c.giveBack(ctx, res)
	allowance := c.p.allowance() // read before the route: call.allowance
	if rt, err := c.p.Route(req); err == nil {
		c.route, c.allowance = rt, allowance
	}
	if !c.t.tel.disabled {
		c.event("throttle.rebooked", attribute.String("throttle.reason", why))
	}
}

// rebook says why a request woken for its slot (slot on this process's
// clock) must book again rather than send, or "" when it may send: a rule
// was made stricter while it waited ("lowered": a limit the provider
// stated, learned.go); its slot is one a wider measured allowance leaves
// empty ("vacated"); or it woke later than the allowance ("late", a stall:
// sent now, it would crowd the provider's window with the slots after it;
// Profile.Jitter where the preset fixed the allowance). A late wake's
// lateness is recorded as a latency sample (the least the answer would
// have taken): a machine that stays that slow widens the measured
// allowance rather than have every request book again.
func (c *call) rebook(gen int64, res *limiter.Reservation, slot time.Time) string {
	if c.p.lowered.Load() != gen {
		return "lowered"
	}
	h := c.p.head
	if h == nil {
		if c.p.Jitter > 0 && time.Since(slot) > c.p.Jitter {
			return "late"
		}
		return ""
	}
	now := h.current()
	// A slot of this replica's own share (an outage) is paced by the
	// share, not by the rule: vacated's arithmetic is not its own.
	if !res.Local() && vacated(c.route.Rules, res.SendAt(), now-c.allowance) {
		return "vacated"
	}
	if time.Since(slot) <= now {
		return ""
	}
	h.observe(slot)
	return "late"
}

// openScope returns the penalty of one of the request's scopes that this
// process knows to be open, or nil.
func (c *call) openScope() *PenaltyError {
	if c.p.breakers.Len() == 0 {
		return nil
	}
	for _, sc := range c.route.Scopes {
		if until, code, open := c.p.breakers.Penalty(sc); open {
			return c.penaltyError(sc, until, code)
		}
	}
	return nil
}

// giveBack returns a slot that will not be used, off the request path.
func (c *call) giveBack(ctx context.Context, res limiter.Reservation) {
	c.t.bg.do(ctx, func(ctx context.Context) error { return res.Cancel(ctx) }, nil)
}

// giveBackNow runs give (a Reservation's Cancel or CancelCalendar) before
// the call goes on, so that a retry books with the slots back (on a
// failure path already); off the path of a caller that gave up, who
// retries nothing and must not wait on Redis for its error.
func (c *call) giveBackNow(ctx context.Context, give func(context.Context) error) {
	if ctx.Err() != nil {
		c.t.bg.do(ctx, give, nil)
		return
	}
	c.t.bg.run(job{ctx: context.WithoutCancel(ctx), run: give}, false)
}

// penalize shares the provider's quota verdict with every replica.
func (c *call) penalize(ctx context.Context) {
	v := &c.verdict
	if v.Scope == "" && len(c.route.Scopes) > 0 {
		v.Scope = c.route.Scopes[0]
	}
	if v.Scope == "" {
		return
	}
	rs, sent := c.p.resets, c.resetsAtSend
	if rs.ended(v.Scope, v.Code, sent) {
		// Answered before a reset that has ended it since: stale.
		return
	}
	if v.Until.IsZero() {
		v.Until = time.Now().Add(c.p.DefaultPenalty)
	}
	// This process stops at once; the other replicas once the penalty is
	// written, off the request path.
	if stopped := c.p.stop(v.Scope, v.Until, v.Code, "answer"); !stopped.Equal(v.Until) {
		// Clamped to MaxPenalty from this replica's now: no longer the
		// provider's instant.
		v.Until, v.Stated = stopped, false
	}
	if rs.ended(v.Scope, v.Code, sent) {
		// A reset came between the check and the stop, and may have
		// swept the breakers before it opened. Only this penalty's: one
		// the breaker held already, longer, stands.
		c.p.breakers.LiftIf(v.Scope, v.Until, v.Code)
		return
	}
	c.t.tel.penalty(ctx, c)
	learned := c.learn()
	lim, tel, name := c.t.limiter, c.t.tel, c.p.Name
	pen := limiter.Penalty{Scope: v.Scope, Until: v.Until, Code: v.Code, Stated: v.Stated, Sent: c.sent}
	p := c.p
	// A reset since the answer ended the penalty: it is not written, or,
	// when the reset came while it was written (and may have read the
	// penalties before the write landed), lifted again: exactly what the
	// write stored (liftWritten). A reset that comes after the second
	// check reads the penalty and lifts it itself.
	write := func(ctx context.Context) error {
		if rs.ended(pen.Scope, pen.Code, sent) {
			return nil
		}
		stored, err := penalizeStored(ctx, lim, name, pen)
		if errors.Is(err, limiter.ErrStalePenalty) {
			// Another replica saw the provider reset this quota after
			// the call went out: this replica's breaker for it goes too
			// (a Shared limiter's Listener.Stale has closed it already,
			// staleRouter; any other limiter has not).
			p.breakers.LiftIf(pen.Scope, pen.Until, pen.Code)
			return nil
		}
		if rs.ended(pen.Scope, pen.Code, sent) {
			if lerr := liftWritten(ctx, lim, name, pen.Scope, stored); err == nil {
				err = lerr
			}
			p.breakers.LiftIf(pen.Scope, pen.Until, pen.Code)
		}
		return err
	}
	if _, ok := lim.(*limiter.Memory); ok {
		// In process: a map write, done before the caller gets the
		// answer, so that a LiftPenalty after it cannot come first
		// (without Redis, the learned limit is local too).
		learned(ctx)
		_ = write(ctx)
		return
	}
	c.t.bg.do(ctx, func(ctx context.Context) error {
		// The learned limit first: the penalty's announcement tells the
		// other replicas to read it.
		learned(ctx)
		return write(ctx)
	}, func(err error) {
		if err != nil {
			tel.log.Warn("throttle: could not share a penalty", "provider", name,
				"scope_kind", scopeKind(pen.Scope), "error", err)
		}
	})
}

// penaltyError is the one place the error a caller gets for a penalised
// scope is built, whichever check found the penalty.
func (c *call) penaltyError(scope string, until time.Time, code string) *PenaltyError {
	return &PenaltyError{Provider: c.p.Name, API: c.route.API, Scope: scope, Until: until, Code: code}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// hasCalendar reports whether one of rules counts a day's, a month's or
// another calendar window's calls.
func hasCalendar(rules []rule.Rule) bool {
	for i := range rules {
		if rules[i].Unit() != 0 {
			return true
		}
	}
	return false
}

// hasConcurrency reports whether a rule caps requests in flight, so that
// the lease must be released when the answer arrives.
func hasConcurrency(rules []rule.Rule) bool {
	for i := range rules {
		if rules[i].IsConcurrency() {
			return true
		}
	}
	return false
}
