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
// queue, whatever their rules, and one background call then reserves all
// of them in arrival order. Redis spends most of a reservation on the call
// itself (the round trip, reading its clock), so a call that reserves many
// requests costs little more than one that reserves one, and the replica
// needs fewer round trips than requests under load. The call runs each
// request as if it had made its own call at that instant, seeing what the
// requests before it booked: consecutive requests with the same rules and
// scopes share one segment of the script, others each have their own.
// Without load every request makes its own call at once.

// maxBatch bounds the requests of one call, and maxBatchBytes the size of
// their keys and arguments, so that one script never holds Redis for long.
const (
	maxBatch      = 64
	maxBatchBytes = 8 << 10
	segmentBytes  = 32
)

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

// lane queues the requests of one group while a call for it is in flight.
// Requests with a concurrency rule never share a call: each takes its own
// lease id.
type lane struct {
	mu    sync.Mutex
	busy  bool       // a call for this lane is in flight
	queue []*pending // requests waiting for the next call, in arrival order
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

// get returns req's lane, or nil when req does not coalesce.
func (ls *lanes) get(req *Request) *lane {
	if ls.off {
		return nil
	}
	for i := range req.Rules {
		if core(&req.Rules[i]).Kind == rulecore.Concurrency {
			return nil
		}
	}
	ls.mu.RLock()
	ln := ls.m[req.Group]
	ls.mu.RUnlock()
	if ln != nil {
		return ln
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ln = ls.m[req.Group]; ln != nil {
		return ln
	}
	if len(ls.m) >= maxLanes {
		ls.evictIdle()
		if len(ls.m) >= maxLanes {
			return nil
		}
	}
	ln = &lane{}
	ls.m[req.Group] = ln
	return ln
}

// evictIdle drops the lanes with no call in flight; ls.mu is held. A
// requester still holding a dropped lane uses it as before.
func (ls *lanes) evictIdle() {
	for id, ln := range ls.m {
		if ln.idle() {
			delete(ls.m, id)
		}
	}
}

func (ln *lane) idle() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return !ln.busy && len(ln.queue) == 0
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

// reserve makes the call at once when the lane is idle, and otherwise
// queues req for the lane's next call.
func (ln *lane) reserve(ctx context.Context, l *redisLimiter, req Request) (Reservation, error) {
	ln.mu.Lock()
	if !ln.busy {
		ln.busy = true
		ln.mu.Unlock()
		return ln.reserveNow(ctx, l, req)
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

// reserveNow makes the lane's call for req alone; the lane is busy.
func (ln *lane) reserveNow(ctx context.Context, l *redisLimiter, req Request) (Reservation, error) {
	// Deferred: a panic recovered above (an HTTP server's) must not leave
	// the lane busy with nobody to serve its queue.
	defer ln.handOver(l)
	return l.reserveAlone(ctx, req)
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

// handOver ends a call: with requests queued meanwhile, a flusher takes
// them in the next call; otherwise the lane is idle again.
func (ln *lane) handOver(l *redisLimiter) {
	ln.mu.Lock()
	if len(ln.queue) == 0 {
		ln.busy = false
		ln.mu.Unlock()
		return
	}
	ln.mu.Unlock()
	go ln.flush(l)
}

// flush reserves the queued requests, up to maxBatch and maxBatchBytes per
// call, until the queue is empty.
func (ln *lane) flush(l *redisLimiter) {
	var (
		batch []*pending
		reqs  []Request
		out   []Reservation
	)
	for {
		ln.mu.Lock()
		batch = batch[:0]
		n, size := 0, 0
		for _, p := range ln.queue {
			var prev *Request
			if len(batch) > 0 {
				prev = &batch[len(batch)-1].req
			}
			add := p.req.addsBytes(prev, l.prefix)
			if n > 0 || len(batch) == maxBatch || len(batch) > 0 && size+add > maxBatchBytes {
				ln.queue[n] = p
				n++
				continue
			}
			size += add
			p.sent = true
			batch = append(batch, p)
		}
		clear(ln.queue[n:])
		ln.queue = ln.queue[:n]
		if len(batch) == 0 {
			ln.busy = false
			ln.mu.Unlock()
			return
		}
		ln.mu.Unlock()

		reqs, out = reqs[:0], out[:0]
		now := time.Now()
		for _, p := range batch {
			// The wait a request accepts counts from when it asked, so its
			// time in the queue comes off it.
			r := p.req
			r.MaxWait = max(0, r.MaxWait-now.Sub(p.queued))
			reqs = append(reqs, r)
			out = append(out, Reservation{})
		}
		// No requester's cancellation cuts the shared call short (see
		// reserveAlone); one that gave up meanwhile has its slot given
		// back below.
		err := l.reserveN(context.WithoutCancel(batch[0].ctx), reqs, out)

		var giveBack []*pending
		ln.mu.Lock()
		for i, p := range batch {
			p.res, p.err, p.answered = out[i], err, true
			if p.abandoned && err == nil && out[i].ok {
				giveBack = append(giveBack, p)
			}
		}
		ln.mu.Unlock()
		for _, p := range batch {
			if !p.abandoned {
				p.done <- struct{}{}
			} else if err != nil || !p.res.ok {
				p.recycle()
			}
		}
		if len(giveBack) > 0 {
			// Aside, so that a slow Redis delays no queued request.
			go l.giveBack(giveBack)
		}
		clear(batch)
		clear(reqs)
	}
}

// giveBack cancels the slots booked for requests whose requesters gave up
// while their call was in flight, and recycles them: one call per run of
// requests with the same rules, the newest run first, since a slot comes
// back only while nothing was booked after it.
func (l *redisLimiter) giveBack(ps []*pending) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ps[0].ctx), time.Second)
	defer cancel()
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
	for _, p := range ps {
		p.recycle()
	}
}

// argBytes estimates the bytes a request that starts a segment adds to a
// call: its keys, each "{prefix:group}:<tag>:" and its name, the group's
// epoch marker, the segment's own arguments (32 bytes) and each rule's (a
// paced rule's four numbers, a calendar rule's four window starts). A
// request in the same segment as the one before adds segmentBytes: its own
// two arguments. Redis's time for a call follows the same shape: a segment
// costs about as much as a call of its own, a request in it far less.
func (p *Request) argBytes(prefix string) int {
	tag := len(prefix) + len(p.Group) + 6
	n := 32 + tag
	for i := range p.Rules {
		r := core(&p.Rules[i])
		n += tag + len(r.Key) + ruleArgBytes[r.Kind]
		if r.AheadCapped {
			n += 12
		}
	}
	for _, s := range p.Scopes {
		n += tag + len(s)
	}
	return n
}

// ruleArgBytes is about what each kind of rule's arguments take.
var ruleArgBytes = [...]int{rulecore.Paced: 24, rulecore.Window: 32, rulecore.Concurrency: 40, rulecore.Calendar: 72}

// addsBytes is what p adds to a call after prev (nil: p is the first).
func (p *Request) addsBytes(prev *Request, prefix string) int {
	if prev != nil && prev.sameShape(p) {
		return segmentBytes
	}
	return p.argBytes(prefix)
}
