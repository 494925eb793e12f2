package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// gate holds each reserve call, once Redis has answered it, until the test
// lets it go, so that a test can queue requests behind a call in flight;
// and it reports every cancel call once it has run.
type gate struct {
	held      chan int      // a reserve call is held: how many requests it reserves
	release   chan struct{} // lets one held call go
	cancelled chan struct{} // a cancel call has run
	open      atomic.Bool   // let every call through
	// each, when set, holds every reserve call on its own: it is sent
	// to calls with the channel that lets it go, rather than held and
	// release.
	each chan heldCall

	mu    sync.Mutex
	sizes []int // bytes of each reserve call's keys and arguments
}

func newGate() *gate {
	return &gate{held: make(chan int, 16), release: make(chan struct{}), cancelled: make(chan struct{}, 16)}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if cmd.Name() != "evalsha" || len(args) < 3 || g.open.Load() {
			return next(ctx, cmd)
		}
		switch args[1] {
		case limiter.ReserveSHA, limiter.OneSHA:
			n := reservedBy(args)
			size := 0
			for _, a := range args[3:] {
				if b, ok := a.([]byte); ok {
					size += len(b) // the lean call's packed numbers
				} else {
					size += len(fmt.Sprint(a))
				}
			}
			g.mu.Lock()
			g.sizes = append(g.sizes, size)
			g.mu.Unlock()
			// Held once Redis has answered: the call has its instant.
			err := next(ctx, cmd)
			if g.each != nil {
				release := make(chan struct{})
				g.each <- heldCall{n, release}
				<-release
				return err
			}
			g.held <- n
			<-g.release
			return err
		case limiter.CancelSHA:
			err := next(ctx, cmd)
			if err == nil || errors.Is(err, redis.Nil) {
				g.cancelled <- struct{}{}
			}
			return err
		}
		return next(ctx, cmd)
	}
}

// reservedBy counts the requests of a reserve call: one for one.lua's,
// else "evalsha sha numkeys keys... n ..." with one segment, "evalsha sha
// numkeys keys... m <segments> (<keys> <args> n ...)..." with several,
// "... q|r <ttl> <packed numbers>" lean.
func reservedBy(args []any) int {
	if args[1] == limiter.OneSHA {
		return 1
	}
	numKeys, _ := strconv.Atoi(args[2].(string))
	argv := args[3+numKeys:]
	if argv[0] == "q" || argv[0] == "r" {
		return limiter.LeanRequests(argv[2].([]byte))
	}
	if argv[0] != "m" {
		n, _ := strconv.Atoi(argv[0].(string))
		return n
	}
	segs, _ := strconv.Atoi(argv[1].(string))
	total, at := 0, 2
	for range segs {
		na, _ := strconv.Atoi(argv[at+1].(string))
		n, _ := strconv.Atoi(argv[at+2].(string))
		total += n
		at += 2 + na
	}
	return total
}

// heldCall is a reserve call held by a gate: how many requests it
// reserves, and the channel to close to let it go.
type heldCall struct {
	n       int
	release chan struct{}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type outcome struct {
	res limiter.Reservation
	err error
}

func reserveAsync(ctx context.Context, l limiter.Limiter, req limiter.Request) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := l.Reserve(ctx, req)
		ch <- outcome{res, err}
	}()
	return ch
}

// coalescing sets up a limiter whose reserve calls the gate holds, and a
// channel that receives each time a request of group joins a queue.
func coalescing(t *testing.T, opts ...limiter.RedisOption) (*limiter.Redis, *gate, limiter.Request, <-chan struct{}) {
	t.Helper()
	c := redistest.Shared(t).Client(t)
	l, err := limiter.NewRedis(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	// T = 6 s, far longer than the test's steps take on a loaded machine,
	// so that slots stay exactly T apart whenever each call runs.
	rl := rule.Must(rule.New("paced", 10, time.Minute))
	req := limiter.Request{Group: limitertest.Group(t), Rules: []rule.Rule{rl}, MaxWait: time.Hour}
	// Load the scripts before the gate, so that no EVAL fallback runs
	// behind it.
	if err := limiter.LoadScripts(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	warm := req
	warm.Group += "-warm"
	res, err := l.Reserve(context.Background(), warm)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Cancel(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := newGate()
	c.AddHook(g)
	t.Cleanup(func() { g.open.Store(true) })
	queued := make(chan struct{}, 16)
	limiter.SetOnQueued(func(group string) {
		if group == req.Group {
			queued <- struct{}{}
		}
	})
	t.Cleanup(func() { limiter.SetOnQueued(nil) })
	return l, g, req, queued
}

// Requests that arrive while a call is in flight go together in the next
// call, in arrival order, each with its own answer: a refusal in the middle
// (MaxWait 0) charges nothing, and the others are booked one T apart.
func TestRedisCoalescedCallAnswersEachRequest(t *testing.T) {
	l, g, req, queued := coalescing(t)
	ctx := context.Background()

	first := reserveAsync(ctx, l, req)
	if n := <-g.held; n != 1 {
		t.Fatalf("first call reserves %d requests, want 1", n)
	}
	noWait := req
	noWait.MaxWait = 0
	var waiting []<-chan outcome
	for _, r := range []limiter.Request{req, noWait, req} {
		waiting = append(waiting, reserveAsync(ctx, l, r))
		<-queued // one at a time, so the queue keeps this order
	}
	g.release <- struct{}{}
	o1 := <-first
	if o1.err != nil || !o1.res.OK() || o1.res.Delay() != 0 {
		t.Fatalf("first: %+v %v, want admitted at once", o1.res, o1.err)
	}
	if n := <-g.held; n != 3 {
		t.Fatalf("second call reserves %d requests, want the 3 queued", n)
	}
	g.release <- struct{}{}
	var got [3]outcome
	for i, ch := range waiting {
		got[i] = <-ch
		if got[i].err != nil {
			t.Fatal(got[i].err)
		}
	}
	if !got[0].res.OK() || got[1].res.OK() || !got[2].res.OK() {
		t.Fatalf("admitted %v %v %v, want the MaxWait-0 request alone refused", got[0].res.OK(), got[1].res.OK(), got[2].res.OK())
	}
	// Slots exactly T apart after the first: the refusal charged nothing,
	// and its retry-after lands on the slot the third request then took.
	slots := []time.Time{o1.res.SendAt(), got[0].res.SendAt(), got[2].res.SendAt()}
	for i := 1; i < len(slots); i++ {
		if d, T := slots[i].Sub(slots[i-1]), limiter.RuleInterval(req.Rules[0]); d != T {
			t.Errorf("slot %d is %v after slot %d, want exactly T = %v", i, d, i-1, T)
		}
	}
	if at := got[1].res.SendAt().Add(got[1].res.RetryAfter()); !at.Equal(slots[2]) {
		t.Errorf("refused request's retry-after points at %v, want the next free slot %v", at, slots[2])
	}
}

// A request whose context ends while it waits for a shared call gets its
// context's error at once, and loses nothing: queued, it is never sent;
// sent, the slot its call booked is given back, and so are the slots of
// every request of that call that gave up (newest first, so each is the
// last booked when its turn comes).
func TestRedisCoalescedCancelGivesSlotBack(t *testing.T) {
	l, g, req, queued := coalescing(t)
	bg := context.Background()

	first := reserveAsync(bg, l, req)
	<-g.held
	queuedCtx, cancelQueued := context.WithCancel(bg)
	sentCtx, cancelSent := context.WithCancel(bg)
	kept := reserveAsync(bg, l, req)
	<-queued
	gone := reserveAsync(queuedCtx, l, req) // cancelled while queued
	<-queued
	late1 := reserveAsync(sentCtx, l, req) // these two: cancelled while their call is in flight
	<-queued
	late2 := reserveAsync(sentCtx, l, req)
	<-queued

	cancelQueued()
	if o := <-gone; errors.Is(o.err, limiter.ErrUnavailable) || !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled while queued: %+v %v, want context.Canceled alone (not a store failure)", o.res, o.err)
	}
	g.release <- struct{}{}
	o1 := <-first
	if n := <-g.held; n != 3 {
		t.Fatalf("second call reserves %d requests, want 3 (the cancelled one is never sent)", n)
	}
	cancelSent()
	for _, ch := range []<-chan outcome{late1, late2} {
		if o := <-ch; !errors.Is(o.err, context.Canceled) {
			t.Fatalf("cancelled in flight: %+v %v, want context.Canceled", o.res, o.err)
		}
	}
	g.release <- struct{}{}
	o2 := <-kept
	if o1.err != nil || o2.err != nil || !o2.res.OK() {
		t.Fatalf("first %v; kept %+v %v", o1.err, o2.res, o2.err)
	}
	<-g.cancelled // the slots booked for the two that gave up are given back
	g.open.Store(true)
	next, err := l.Reserve(bg, req)
	if err != nil {
		t.Fatal(err)
	}
	if d, T := next.SendAt().Sub(o2.res.SendAt()), limiter.RuleInterval(req.Rules[0]); d != T {
		t.Fatalf("next slot %v after the kept one, want T = %v (both abandoned slots given back)", d, T)
	}
}

// A slot given back comes back only while nothing was booked after it, so
// a request queued behind one whose requester gave up during its call
// waits for the give-back: it gets the slot given back, T after the one
// before, not the one after it. (The give-back used to go aside while the
// next call booked the rule: 2T, nearly every time.)
func TestRedisCoalescedGiveBackBeforeTheNextCall(t *testing.T) {
	l, g, req, queued := coalescing(t)
	bg := context.Background()
	first := reserveAsync(bg, l, req)
	<-g.held
	lateCtx, cancelLate := context.WithCancel(bg)
	late := reserveAsync(lateCtx, l, req)
	<-queued
	g.release <- struct{}{}
	o1 := <-first
	if n := <-g.held; n != 1 { // late's call: Redis has booked its slot
		t.Fatalf("second call reserves %d requests, want 1", n)
	}
	next := reserveAsync(bg, l, req)
	<-queued
	cancelLate()
	if o := <-late; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled in flight: %+v %v, want context.Canceled", o.res, o.err)
	}
	g.release <- struct{}{}
	if n := <-g.held; n != 1 {
		t.Fatalf("third call reserves %d requests, want 1", n)
	}
	select {
	case <-g.cancelled:
	default:
		t.Fatal("the next call of the rule was made before the abandoned slot was given back")
	}
	g.release <- struct{}{}
	o3 := <-next
	if o1.err != nil || o3.err != nil || !o3.res.OK() {
		t.Fatalf("first %v; next %+v %v", o1.err, o3.res, o3.err)
	}
	if d, T := o3.res.SendAt().Sub(o1.res.SendAt()), limiter.RuleInterval(req.Rules[0]); d != T {
		t.Fatalf("next slot %v after the first, want T = %v (the abandoned slot given back first)", d, T)
	}
}

// A penalty refuses every request of a shared call, each with the scope and
// its end, and charges none of them.
func TestRedisCoalescedPenaltyRefusesAll(t *testing.T) {
	l, g, req, queued := coalescing(t)
	bg := context.Background()
	req.Scopes = []string{"api:x", "app"}
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if err := l.Penalize(bg, req.Group, limiter.Penalty{Scope: "app", Until: until, Code: "90018"}); err != nil {
		t.Fatal(err)
	}
	first := reserveAsync(bg, l, req)
	<-g.held
	var waiting []<-chan outcome
	for range 2 {
		waiting = append(waiting, reserveAsync(bg, l, req))
		<-queued
	}
	g.release <- struct{}{}
	if n := <-g.held; n != 2 {
		t.Fatalf("second call reserves %d requests, want 2", n)
	}
	g.release <- struct{}{}
	for i, ch := range append([]<-chan outcome{first}, waiting...) {
		o := <-ch
		if o.err != nil || o.res.OK() || o.res.Penalty() == nil {
			t.Fatalf("request %d: %+v %v, want refused by the penalty", i, o.res, o.err)
		}
		if p := o.res.Penalty(); p.Scope != "app" || !p.Until.Equal(until) || p.Code != "90018" {
			t.Errorf("request %d: penalty %+v, want scope app until %v code 90018", i, *p, until)
		}
	}
	g.open.Store(true)
	// Nothing was charged: once the penalty is gone, the rule admits at once.
	req.Scopes = []string{"api:x"}
	if res, err := l.Reserve(bg, req); err != nil || !res.OK() || res.Delay() != 0 {
		t.Fatalf("after the penalised calls: %+v %v, want admitted at once", res, err)
	}
}

// The wait a queued request accepts counts from when it asked: its time in
// the queue comes off it, so no request is booked to send later than its
// MaxWait after it called Reserve.
func TestRedisCoalescedQueueTimeCountsAgainstMaxWait(t *testing.T) {
	l, g, req, queued := coalescing(t)
	bg := context.Background()
	first := reserveAsync(bg, l, req)
	<-g.held
	asked := time.Now()
	tight := req
	tight.MaxWait = limiter.RuleInterval(req.Rules[0]) - time.Second // its slot lies T after the first's
	ch := reserveAsync(bg, l, tight)
	<-queued
	time.Sleep(2 * time.Second) // the scenario: two seconds in the queue
	g.release <- struct{}{}
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	<-g.held
	g.release <- struct{}{}
	o := <-ch
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.OK() {
		t.Fatalf("booked to send %v after it asked, beyond its MaxWait %v", o.res.SendAt().Sub(asked), tight.MaxWait)
	}
}
