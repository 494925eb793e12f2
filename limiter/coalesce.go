package limiter

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// Coalescing: while a replica's script call for a group (one hash tag, so
// one Redis Cluster slot) is in flight, further requests of that group
// queue, whatever their rules, and one background call then reserves many
// of them in arrival order. Redis spends most of a reservation on the call
// itself (the round trip, reading its clock), so a call that reserves many
// requests costs little more than one that reserves one, and the replica
// needs fewer round trips than requests under load. The call runs each
// request as if it had made its own call at that instant, seeing what the
// requests before it booked: consecutive requests with the same rules and
// scopes share one segment of the script, others each have their own.
// Without load every request makes its own call at once.
//
// A lane keeps up to maxInFlight calls in flight, so that the replica
// builds and reads one call while Redis runs another: one call at a time
// leaves both idle for most of its cycle. Calls in flight together may run
// in Redis in either order, so they never share a rule's key: a request
// whose rule a call in flight books waits for that call, and so does every
// later request sharing a rule with a request left waiting. Requests that
// share no rule decide on different state, in any order alike; penalty
// keys and the epoch marker are only read (or renewed) by reserves. The
// rules of one hot key are thus booked one call at a time, in arrival
// order, as before; requests spread over many rule sets fill several calls.

// maxBatch bounds the requests of one call, and maxBatchBytes the size of
// their keys and arguments, so that one script never holds Redis for long.
const (
	maxBatch      = 64
	maxBatchBytes = 8 << 10
	segmentBytes  = 32
)

// maxInFlight bounds the calls of one lane in flight at once.
const maxInFlight = 2

// maxLanes bounds the groups that coalesce; requests of groups beyond it
// make their own calls.
const maxLanes = 4096

// onQueued, when set (by tests), is called each time a request joins a
// lane's queue.
var onQueued atomic.Pointer[func(group string)]

// withoutCoalescing makes every Reserve its own script call, even under
// load; useful to measure the cost of one call.
func withoutCoalescing() redisOption {
	return redisOptionFunc(func(r *redisLimiter) { r.lanes.off = true })
}

// lanes finds the lane of a request's group.
type lanes struct {
	off bool
	mu  sync.RWMutex
	m   map[string]*lane
}

// lane queues the requests of one group while calls for it are in flight.
// Requests with a concurrency rule queue as the others do, but never share
// a call: each takes its own lease id.
type lane struct {
	mu      sync.Mutex
	dropped bool            // evicted from lanes: its requesters find the group's lane again
	calls   int             // calls in flight
	held    map[string]int  // rule keys the calls in flight book: how many requests
	queue   []*pending      // requests waiting for a call, in arrival order
	left    map[string]bool // scratch for take: keys of requests left in the queue
}

// pending is a queued request. Its fields after req are written by the
// lane's flusher and read by the requester once done delivers, or under
// lane.mu.
type pending struct {
	ctx    context.Context
	req    Request
	queued time.Time // when it joined the queue
	res    Reservation
	err    error
	done   chan struct{} // receives once the answer is in res and err

	sent      bool // taken into a call (under lane.mu)
	abandoned bool // the requester gave up once sent (under lane.mu)
	answered  bool // res and err are final (under lane.mu)
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func (p *pending) recycle() {
	*p = pending{done: p.done}
	pendingPool.Put(p)
}

// get returns req's lane with its mu held, or nil when req does not
// coalesce. A lane evicted between the lookup and the lock is looked up
// again: two lanes of one group would make calls booking the same rules at
// once, in no order.
func (ls *lanes) get(req *Request) *lane {
	if ls.off {
		return nil
	}
	for {
		ls.mu.RLock()
		ln := ls.m[req.Group]
		ls.mu.RUnlock()
		if ln == nil {
			return ls.add(req.Group)
		}
		ln.mu.Lock()
		if !ln.dropped {
			return ln
		}
		ln.mu.Unlock()
	}
}

// add returns group's lane, made when there is none, with its mu held, or
// nil when maxLanes lanes are busy.
func (ls *lanes) add(group string) *lane {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.m[group]
	if ln == nil {
		if len(ls.m) >= maxLanes {
			ls.evictIdle()
			if len(ls.m) >= maxLanes {
				return nil
			}
		}
		ln = &lane{}
		ls.m[group] = ln
	}
	// ls.mu is held: the lane cannot be evicted before it is locked.
	ln.mu.Lock()
	return ln
}

// evictIdle drops the lanes with no call in flight, nothing queued and no
// rule held; ls.mu is held.
func (ls *lanes) evictIdle() {
	for id, ln := range ls.m {
		ln.mu.Lock()
		if ln.calls == 0 && len(ln.queue) == 0 && len(ln.held) == 0 {
			ln.dropped = true
			delete(ls.m, id)
		}
		ln.mu.Unlock()
	}
}

// sameShape reports whether req has exactly p's group, rules and scopes,
// so that one segment of a call can reserve both.
func (p *Request) sameShape(req *Request) bool {
	if p.Group != req.Group || len(p.Rules) != len(req.Rules) || len(p.Scopes) != len(req.Scopes) {
		return false
	}
	for i := range p.Rules {
		if p.Rules[i] != req.Rules[i] {
			return false
		}
	}
	for i := range p.Scopes {
		if p.Scopes[i] != req.Scopes[i] {
			return false
		}
	}
	return true
}

// free reports whether no call in flight books any of req's rules; ln.mu
// is held.
func (ln *lane) free(req *Request) bool {
	if len(ln.held) == 0 {
		return true
	}
	for i := range req.Rules {
		if ln.held[req.Rules[i].Key()] > 0 {
			return false
		}
	}
	return true
}

// hold marks req's rules as booked by a call in flight (d = 1) or no
// longer (d = -1); ln.mu is held.
func (ln *lane) hold(req *Request, d int) {
	if ln.held == nil {
		ln.held = make(map[string]int)
	}
	for i := range req.Rules {
		k := req.Rules[i].Key()
		if n := ln.held[k] + d; n > 0 {
			ln.held[k] = n
		} else {
			delete(ln.held, k)
		}
	}
}

// reserve makes a call for req at once when the lane has room for one and
// nothing before req waits or books its rules, and otherwise queues req
// for a later call; ln.mu is held on entry (lanes.get).
func (ln *lane) reserve(ctx context.Context, l *redisLimiter, req Request) (Reservation, error) {
	if ln.calls < maxInFlight && len(ln.queue) == 0 && ln.free(&req) {
		ln.calls++
		ln.hold(&req, 1)
		ln.mu.Unlock()
		return ln.reserveNow(ctx, l, &req)
	}
	p := pendingPool.Get().(*pending)
	p.ctx, p.req, p.queued = ctx, req, time.Now()
	ln.queue = append(ln.queue, p)
	ln.mu.Unlock()
	if f := onQueued.Load(); f != nil {
		(*f)(req.Group)
	}

	select {
	case <-p.done:
	case <-ctx.Done():
		ln.mu.Lock()
		if !p.answered {
			if p.sent {
				// In a call already: the flusher gives its slot back.
				p.abandoned = true
				ln.mu.Unlock()
			} else {
				ln.remove(p)
				ln.mu.Unlock()
				p.recycle()
			}
			// The caller gave up: the context's error alone, never a
			// store failure.
			return Reservation{}, ctx.Err()
		}
		ln.mu.Unlock()
		<-p.done
	}
	res, err := p.res, p.err
	p.recycle()
	return res, err
}

// reserveNow makes a call for req alone; it counts among the lane's calls.
func (ln *lane) reserveNow(ctx context.Context, l *redisLimiter, req *Request) (Reservation, error) {
	// Deferred: a panic recovered above (an HTTP server's) must not leave
	// the lane's call counted with nobody to serve its queue.
	defer ln.done(l, req)
	return l.reserveAlone(ctx, *req)
}

// done ends req's own call and starts calls for what waits.
func (ln *lane) done(l *redisLimiter, req *Request) {
	ln.mu.Lock()
	ln.hold(req, -1)
	ln.calls--
	ln.start(l)
	ln.mu.Unlock()
}

// remove takes p out of the queue; ln.mu is held.
func (ln *lane) remove(p *pending) {
	for i, q := range ln.queue {
		if q == p {
			copy(ln.queue[i:], ln.queue[i+1:])
			ln.queue[len(ln.queue)-1] = nil
			ln.queue = ln.queue[:len(ln.queue)-1]
			return
		}
	}
}

// start starts a call for each batch the queue yields while the lane has
// room; ln.mu is held.
func (ln *lane) start(l *redisLimiter) {
	for {
		batch := ln.next(l)
		if batch == nil {
			return
		}
		go ln.run(l, batch)
	}
}

// next takes the next batch and counts its call among the lane's calls,
// or returns nil when the lane has no room or nothing that may go; ln.mu
// is held.
func (ln *lane) next(l *redisLimiter) []*pending {
	if ln.calls >= maxInFlight || len(ln.queue) == 0 {
		return nil
	}
	batch := ln.take(l)
	if len(batch) == 0 {
		return nil
	}
	ln.calls++
	return batch
}

// run makes the call of batch, then of each batch the queue yields as it
// ends, while there is one: under load a lane's calls are made by the
// same goroutines, whose stacks stay grown for go-redis (a goroutine per
// call grew and copied its stack each time: a tenth of the replica's CPU
// in BenchmarkRedisReserveManyRuleSets/coalesced).
func (ln *lane) run(l *redisLimiter, batch []*pending) {
	for batch != nil {
		batch = ln.flush(l, batch)
	}
}

// take moves the next batch out of the queue and marks its rules held: in
// arrival order, up to maxBatch requests and maxBatchBytes, every request
// that shares no rule with a call in flight or with a request before it
// left waiting; ln.mu is held.
func (ln *lane) take(l *redisLimiter) (batch []*pending) {
	n := 0
	var size callBytes
	clear(ln.left)
	full := false
	for _, p := range ln.queue {
		if !full && ln.free(&p.req) && !ln.behind(&p.req) {
			var prev *Request
			if len(batch) > 0 {
				prev = &batch[len(batch)-1].req
			}
			with := size.with(&p.req, prev, l.prefix)
			alone := p.req.leased()
			if full = len(batch) == maxBatch || len(batch) > 0 && (alone || with.size() > maxBatchBytes); !full {
				size = with
				p.sent = true
				batch = append(batch, p)
				// A request with a concurrency rule has its call alone.
				full = alone
				continue
			}
		}
		ln.queue[n] = p
		n++
		if !full {
			ln.leave(&p.req)
		}
	}
	clear(ln.queue[n:])
	ln.queue = ln.queue[:n]
	for _, p := range batch {
		ln.hold(&p.req, 1)
	}
	return batch
}

// leased reports whether req has a concurrency rule, whose lease id is its
// own: it never shares a call.
func (req *Request) leased() bool {
	for i := range req.Rules {
		if core(&req.Rules[i]).Kind == rulecore.Concurrency {
			return true
		}
	}
	return false
}

// leave records the rules of a request left waiting, so that no later
// request of them overtakes it; behind reports whether req shares one.
func (ln *lane) leave(req *Request) {
	if ln.left == nil {
		ln.left = make(map[string]bool)
	}
	for i := range req.Rules {
		ln.left[req.Rules[i].Key()] = true
	}
}

func (ln *lane) behind(req *Request) bool {
	if len(ln.left) == 0 {
		return false
	}
	for i := range req.Rules {
		if ln.left[req.Rules[i].Key()] {
			return true
		}
	}
	return false
}

// flush reserves batch in one call, answers its requesters, and returns
// the next batch, whose call it counts, or nil; it starts calls for any
// further batches the queue then yields.
func (ln *lane) flush(l *redisLimiter, batch []*pending) (next []*pending) {
	sc := scratchPool.Get().(*batchScratch)
	defer sc.release()
	reqs, out := sc.reqs[:0], sc.out[:0]
	now := time.Now()
	for _, p := range batch {
		// The wait a request accepts counts from when it asked, so its
		// time in the queue comes off it.
		r := p.req
		r.MaxWait = max(0, r.MaxWait-now.Sub(p.queued))
		reqs = append(reqs, r)
		out = append(out, Reservation{})
	}
	sc.reqs, sc.out = reqs, out
	// No requester's cancellation cuts the shared call short (see
	// reserveAlone); one that gave up meanwhile has its slot given back
	// below.
	err := l.reserveN(context.WithoutCancel(batch[0].ctx), reqs, out)

	var giveBack []*pending
	ln.mu.Lock()
	for i, p := range batch {
		p.res, p.err, p.answered = out[i], err, true
		if err != nil {
			// A reply that failed part-way read may have filled some
			// answers: none stands, as for a call of its own.
			p.res = Reservation{}
		}
		if p.abandoned && err == nil && out[i].ok {
			// Its rules stay held until the slot is given back: a
			// slot comes back only while nothing was booked after it.
			giveBack = append(giveBack, p)
			continue
		}
		ln.hold(&reqs[i], -1)
	}
	ln.calls--
	next = ln.next(l)
	ln.start(l)
	ln.mu.Unlock()
	for _, p := range batch {
		if !p.abandoned {
			p.done <- struct{}{}
		} else if err != nil || !p.res.ok {
			p.recycle()
		}
	}
	if len(giveBack) > 0 {
		// Aside, so that a slow Redis delays no queued request of other
		// rules.
		if l.spawn != nil {
			l.spawn(func() { ln.giveBack(l, giveBack) })
		} else {
			go ln.giveBack(l, giveBack)
		}
	}
	return next
}

// batchScratch is a flush's requests and answers, reused from call to
// call: the requesters keep copies of the answers.
type batchScratch struct {
	reqs []Request
	out  []Reservation
}

var scratchPool = sync.Pool{New: func() any { return new(batchScratch) }}

func (sc *batchScratch) release() {
	clear(sc.reqs)
	clear(sc.out)
	sc.reqs, sc.out = sc.reqs[:0], sc.out[:0]
	scratchPool.Put(sc)
}

// giveBack cancels the slots booked for requests whose requesters gave up
// while their call was in flight, then lets their rules go and recycles
// them: one call per run of requests with the same rules, the newest run
// first, since a slot comes back only while nothing was booked after it
// (which is why their rules stay held meanwhile: a request queued behind
// one of them would otherwise book past the slot before it came back).
func (ln *lane) giveBack(l *redisLimiter, ps []*pending) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ps[0].ctx), time.Second)
	defer cancel()
	defer func() {
		ln.mu.Lock()
		for _, p := range ps {
			ln.hold(&p.req, -1)
		}
		ln.start(l)
		ln.mu.Unlock()
		for _, p := range ps {
			p.recycle()
		}
	}()
	for end := len(ps); end > 0; {
		start := end - 1
		for start > 0 && ps[start-1].req.sameShape(&ps[end-1].req) {
			start--
		}
		rs := make([]Reservation, 0, end-start)
		for _, p := range ps[start:end] {
			rs = append(rs, p.res)
		}
		_ = l.cancelAll(ctx, ps[start].req, rs)
		end = start
	}
}
