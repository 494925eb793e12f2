package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// Requests of one group with different rules that arrive while a call is in
// flight go together in the next call, each decided as if it had made its
// own call, in arrival order: a rule two of them share is charged in that
// order, a refusal in the middle charges nothing, and a rule set seen twice
// sees what the requests between booked.
func TestRedisCoalescedMixedRuleSets(t *testing.T) {
	l, g, req, queued := coalescing(t)
	ctx := context.Background()
	shared := req.Rules[0] // 10/min: T = 6 s
	a := rule.Must(rule.New("a", 10, time.Minute))
	b := rule.Must(rule.New("b", 5, time.Minute)) // T = 12 s
	with := func(maxWait time.Duration, rs ...rule.Rule) limiter.Request {
		r := req
		r.Rules, r.MaxWait = rs, maxWait
		return r
	}

	first := reserveAsync(ctx, l, with(time.Hour, shared))
	if n := <-g.held; n != 1 {
		t.Fatalf("first call reserves %d requests, want 1", n)
	}
	var waiting []<-chan outcome
	for _, r := range []limiter.Request{
		with(time.Hour, shared, a), // shared's next slot, 6 s after the first
		with(0, shared, b),         // refused: shared is booked 12 s ahead
		with(time.Hour, b),         // b alone is free: at once
		with(time.Hour, shared, b), // b's next slot, 12 s after the one before
	} {
		waiting = append(waiting, reserveAsync(ctx, l, r))
		<-queued // one at a time, so the queue keeps this order
	}
	g.release <- struct{}{}
	o1 := <-first
	if o1.err != nil || !o1.res.OK() {
		t.Fatalf("first: %+v %v", o1.res, o1.err)
	}
	if n := <-g.held; n != 4 {
		t.Fatalf("second call reserves %d requests, want the 4 queued", n)
	}
	g.release <- struct{}{}
	var got [4]outcome
	for i, ch := range waiting {
		if got[i] = <-ch; got[i].err != nil {
			t.Fatal(got[i].err)
		}
	}
	if !got[0].res.OK() || got[1].res.OK() || !got[2].res.OK() || !got[3].res.OK() {
		t.Fatalf("admitted %v %v %v %v, want the MaxWait-0 request alone refused",
			got[0].res.OK(), got[1].res.OK(), got[2].res.OK(), got[3].res.OK())
	}
	base := o1.res.SendAt()
	if d := got[0].res.SendAt().Sub(base); d != 6*time.Second {
		t.Errorf("shared rule's second slot %v after the first, want 6s", d)
	}
	if at := got[1].res.SendAt().Add(got[1].res.RetryAfter()); !at.Equal(base.Add(12 * time.Second)) {
		t.Errorf("refusal's retry-after points %v after the first slot, want 12s", at.Sub(base))
	}
	if d := got[2].res.Delay(); d > 0 {
		t.Errorf("b alone: booked %v ahead, want at once", d)
	}
	if d := got[3].res.SendAt().Sub(got[2].res.SendAt()); d != 12*time.Second {
		t.Errorf("b's second slot %v after its first, want 12s", d)
	}
}

// A batch is bounded in bytes as well as in requests: requests with long
// keys that would make one call too large go in the calls after it, in
// order.
func TestRedisCoalescedBatchBytes(t *testing.T) {
	l, g, req, queued := coalescing(t)
	ctx := context.Background()
	first := reserveAsync(ctx, l, req)
	<-g.held
	// Scopes of the longest length a key may have, a third of the bound
	// in all: two requests fit in one call, three do not. Each request
	// has scopes of its own (a segment of its own): a request in the
	// segment of the one before adds only its own arguments.
	long := func(j int) limiter.Request {
		r := req
		for i := range limiter.MaxBatchBytes / 3 / 256 {
			r.Scopes = append(r.Scopes, fmt.Sprintf("%d-%03d", j, i)+strings.Repeat("s", 248))
		}
		return r
	}
	var waiting []<-chan outcome
	for j := range 3 {
		waiting = append(waiting, reserveAsync(ctx, l, long(j)))
		<-queued
	}
	g.release <- struct{}{}
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	for _, want := range []int{2, 1} {
		if n := <-g.held; n != want {
			t.Fatalf("a call reserves %d requests of a third of the byte bound each, want %d", n, want)
		}
		g.release <- struct{}{}
	}
	for _, ch := range waiting {
		if o := <-ch; o.err != nil || !o.res.OK() {
			t.Fatalf("%+v %v", o.res, o.err)
		}
	}
}

// The byte bound holds whatever the keys' prefix: every key carries it
// (up to 64 bytes), and a request of three rules and three scopes of its
// own then takes about 700 bytes of a call.
func TestRedisCoalescedBatchBytesLongPrefix(t *testing.T) {
	l, g, req, queued := coalescing(t, limiter.WithPrefix(strings.Repeat("x", 64)))
	ctx := context.Background()
	// Every request books the app's rule, as the first does: they queue
	// behind it.
	app := rule.Must(rule.New("app", 1000, time.Second))
	req.Rules = []rule.Rule{app}
	first := reserveAsync(ctx, l, req)
	<-g.held
	var waiting []<-chan outcome
	for j := range 40 {
		r := limiter.Request{Group: req.Group, MaxWait: time.Hour, Scopes: []string{"api:" + strconv.Itoa(j), "app", "egress"}}
		for _, k := range []string{"api:" + strconv.Itoa(j), "egress:" + strconv.Itoa(j)} {
			r.Rules = append(r.Rules, rule.Must(rule.New(k, 1000, time.Second)))
		}
		r.Rules = append(r.Rules[:1], app, r.Rules[1])
		waiting = append(waiting, reserveAsync(ctx, l, r))
		<-queued
	}
	if calls, sizes := callsWithinBound(t, g, first, waiting); calls > 8 {
		t.Fatalf("40 requests took %d calls (%v bytes): the estimate is far above the call's size", calls, sizes)
	}
}

// callsWithinBound lets the held first call go, then every call the
// waiting requests make, checks that each was admitted and that no call
// carried more than the byte bound, and returns how many calls they took
// and the bytes of each call made (the first included).
func callsWithinBound(t *testing.T, g *gate, first <-chan outcome, waiting []<-chan outcome) (calls int, sizes []int) {
	t.Helper()
	g.release <- struct{}{}
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	for done := 0; done < len(waiting); calls++ {
		done += <-g.held
		g.release <- struct{}{}
	}
	for _, ch := range waiting {
		if o := <-ch; o.err != nil || !o.res.OK() {
			t.Fatalf("%+v %v", o.res, o.err)
		}
	}
	g.mu.Lock()
	sizes = append(sizes, g.sizes...)
	g.mu.Unlock()
	for _, n := range sizes {
		if n > limiter.MaxBatchBytes {
			t.Fatalf("a call of %d bytes of keys and arguments, over the bound of %d (calls: %v)", n, limiter.MaxBatchBytes, sizes)
		}
	}
	return calls, sizes
}

// A batch of several rule sets of paced rules goes as one lean call, which
// names each key once: the byte bound counts a request's keys but those
// the request before it names, whether the rule
// sets alternate or one follows a long run of another (which used to count
// as one segment, 32 bytes a request, and went lean at over three times the
// bound).
func TestRedisCoalescedBatchBytesLean(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other func(j int) bool // whether request j is of the second rule set
	}{
		{"a run, then another rule set", func(j int) bool { return j == 63 }},
		{"alternating", func(j int) bool { return j%2 == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, g, req, queued := coalescing(t)
			ctx := context.Background()
			// Every request books the app's rule, as the first does: they
			// queue behind it.
			app := rule.Must(rule.New("app", 1000, time.Second))
			req.Rules = []rule.Rule{app}
			first := reserveAsync(ctx, l, req)
			<-g.held
			ruleSet := func(name string) []rule.Rule {
				rs := []rule.Rule{app}
				for i := range 4 {
					rs = append(rs, rule.Must(rule.New(fmt.Sprintf("%s-%d-", name, i)+strings.Repeat("k", 40), 1_000_000, time.Second)))
				}
				return rs
			}
			a, b := ruleSet("a"), ruleSet("b")
			var waiting []<-chan outcome
			for j := range 64 {
				r := limiter.Request{Group: req.Group, MaxWait: time.Hour, Rules: a}
				if tc.other(j) {
					r.Rules = b
				}
				waiting = append(waiting, reserveAsync(ctx, l, r))
				<-queued
			}
			calls, sizes := callsWithinBound(t, g, first, waiting)
			t.Logf("bytes of each call: %v", sizes)
			// About 630 bytes a request as the bound counts a lean call
			// (about 130 sent): a call of fewer than 8 would mean an
			// estimate far above even that.
			if calls > 64/8+1 {
				t.Fatalf("64 requests took %d calls (%v bytes): the estimate is far above the call's size", calls, sizes)
			}
		})
	}
}

// A request with a concurrency rule queues behind the requests of its
// paced rule as any request does, in arrival order, and has a call of its
// own (its lease id is its own). It used to bypass the queue: its call ran
// beside the one in flight booking the same rule, ahead of the requests
// queued before it.
func TestRedisCoalescedLeasedRequestKeepsItsPlace(t *testing.T) {
	l, g, req, queued := coalescing(t)
	ctx := context.Background()
	leased := req
	leased.Rules = append(append([]rule.Rule(nil), req.Rules...), rule.Must(rule.NewConcurrency("conns", 10, time.Minute)))
	first := reserveAsync(ctx, l, req)
	<-g.held
	var waiting []<-chan outcome
	for _, r := range []limiter.Request{req, leased, req} {
		waiting = append(waiting, reserveAsync(ctx, l, r))
		select {
		case <-queued:
		case n := <-g.held:
			t.Fatalf("a call of %d requests was made while the rule's call was in flight, ahead of the queue", n)
		}
	}
	g.release <- struct{}{}
	o := <-first
	if o.err != nil {
		t.Fatal(o.err)
	}
	for i := range 3 {
		if n := <-g.held; n != 1 {
			t.Fatalf("call %d reserves %d requests, want 1 (each behind the one before, the leased one alone)", i+2, n)
		}
		g.release <- struct{}{}
	}
	prev, T := o.res.SendAt(), limiter.RuleInterval(req.Rules[0])
	for i, ch := range waiting {
		w := <-ch
		if w.err != nil || !w.res.OK() {
			t.Fatalf("request %d: %+v %v", i, w.res, w.err)
		}
		if d := w.res.SendAt().Sub(prev); d != T {
			t.Errorf("request %d booked %v after the one before it, want T = %v (arrival order)", i, d, T)
		}
		prev = w.res.SendAt()
	}
}

// A window rule shared by the segments of one call: each sees the sends
// the segments before it booked.
func TestRedisCoalescedMixedWindow(t *testing.T) {
	l, g, req, queued := coalescing(t)
	ctx := context.Background()
	w := rule.Must(rule.NewWindow("w", 2, time.Minute))
	a := rule.Must(rule.New("a", 10, time.Minute))
	with := func(rs ...rule.Rule) limiter.Request {
		r := req
		r.Rules, r.MaxWait = rs, 0
		return r
	}
	first := reserveAsync(ctx, l, with(w))
	<-g.held
	var waiting []<-chan outcome
	for _, r := range []limiter.Request{with(w), with(w, a), with(w)} {
		waiting = append(waiting, reserveAsync(ctx, l, r))
		<-queued
	}
	g.release <- struct{}{}
	if o := <-first; o.err != nil || !o.res.OK() {
		t.Fatalf("first: %+v %v", o.res, o.err)
	}
	if n := <-g.held; n != 3 {
		t.Fatalf("second call reserves %d requests, want 3", n)
	}
	g.release <- struct{}{}
	var ok []bool
	for _, ch := range waiting {
		o := <-ch
		if o.err != nil {
			t.Fatal(o.err)
		}
		ok = append(ok, o.res.OK())
	}
	if !ok[0] || ok[1] || ok[2] {
		t.Fatalf("admitted %v, want the second send of the window alone (limit 2)", ok)
	}
}

// Requests of different rule sets that give up while their shared call is
// in flight get their slots back, one cancel call per rule set, the newest
// first: a rule they share steps back past both.
func TestRedisCoalescedMixedCancelGivesSlotsBack(t *testing.T) {
	l, g, req, queued := coalescing(t)
	bg := context.Background()
	shared := req.Rules[0] // 10/min: T = 6 s
	other := req
	other.Rules = []rule.Rule{shared, rule.Must(rule.New("b", 10, time.Minute))}

	first := reserveAsync(bg, l, req)
	<-g.held
	sentCtx, cancelSent := context.WithCancel(bg)
	late1 := reserveAsync(sentCtx, l, req)
	<-queued
	late2 := reserveAsync(sentCtx, l, other)
	<-queued
	g.release <- struct{}{}
	o1 := <-first
	if o1.err != nil || !o1.res.OK() {
		t.Fatalf("first: %+v %v", o1.res, o1.err)
	}
	if n := <-g.held; n != 2 {
		t.Fatalf("second call reserves %d requests, want 2", n)
	}
	cancelSent()
	for _, ch := range []<-chan outcome{late1, late2} {
		if o := <-ch; !errors.Is(o.err, context.Canceled) {
			t.Fatalf("cancelled in flight: %+v %v, want context.Canceled", o.res, o.err)
		}
	}
	g.release <- struct{}{}
	<-g.cancelled
	<-g.cancelled
	g.open.Store(true)
	next, err := l.Reserve(bg, req)
	if err != nil {
		t.Fatal(err)
	}
	if d := next.SendAt().Sub(o1.res.SendAt()); d != 6*time.Second {
		t.Fatalf("next slot %v after the first, want T = 6s (both abandoned slots given back)", d)
	}
}

// Calls of one group that book no rule in common are in flight together:
// a request sharing no rule with the call in flight makes its own call at
// once. A request whose rule a call in flight books waits for it, and so
// does a later request sharing a rule with one left waiting, whatever
// else is free: only requests of other rules go ahead of them.
func TestRedisCoalescedCallsInFlightShareNoRule(t *testing.T) {
	l, g, req, queued := coalescing(t)
	ctx := context.Background()
	g.each = make(chan heldCall, 4)
	call := func(want int, what string) heldCall {
		t.Helper()
		var c heldCall
		select {
		case c = <-g.each:
		case <-time.After(10 * time.Second):
			// A bound, not a wait: the call should be held at once.
			t.Fatalf("%s: no call was made", what)
		}
		if c.n != want {
			t.Fatalf("%s: a call of %d requests, want %d", what, c.n, want)
		}
		return c
	}
	with := func(keys ...string) limiter.Request {
		r := req
		r.Rules = nil
		for _, k := range keys {
			if k == "paced" {
				r.Rules = append(r.Rules, req.Rules[0])
				continue
			}
			r.Rules = append(r.Rules, rule.Must(rule.New(k, 10, time.Minute))) // T = 6 s
		}
		return r
	}

	a := reserveAsync(ctx, l, with("paced"))
	callA := call(1, "the first request")
	b := reserveAsync(ctx, l, with("x"))
	callB := call(1, "a request of another rule")
	// Both calls in flight: the lane is full, and what comes queues.
	var waiting []<-chan outcome
	for _, r := range []limiter.Request{
		with("paced", "y"), // c: paced is booked by the call in flight
		with("y"),          // d: free, but behind c through y
		with("z"),          // e: free
	} {
		waiting = append(waiting, reserveAsync(ctx, l, r))
		<-queued
	}
	close(callB.release) // b's call ends: e alone can go
	if o := <-b; o.err != nil || !o.res.OK() {
		t.Fatalf("b: %+v %v", o.res, o.err)
	}
	close(call(1, "after b's call, e alone").release)
	if o := <-waiting[2]; o.err != nil || !o.res.OK() {
		t.Fatalf("e: %+v %v", o.res, o.err)
	}
	close(callA.release) // a's call ends: c, then d
	oa := <-a
	if oa.err != nil || !oa.res.OK() {
		t.Fatalf("a: %+v %v", oa.res, oa.err)
	}
	close(call(2, "after a's call, c and d").release)
	oc, od := <-waiting[0], <-waiting[1]
	if oc.err != nil || !oc.res.OK() || od.err != nil || !od.res.OK() {
		t.Fatalf("c: %+v %v; d: %+v %v", oc.res, oc.err, od.res, od.err)
	}
	if d := oc.res.SendAt().Sub(oa.res.SendAt()); d != 6*time.Second {
		t.Errorf("c %v after a, want paced's next slot, 6s", d)
	}
	if d := od.res.SendAt().Sub(oc.res.SendAt()); d != 6*time.Second {
		t.Errorf("d %v after c, want y's next slot, 6s: d went first", d)
	}
}
