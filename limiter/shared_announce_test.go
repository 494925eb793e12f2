package limiter_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/redis/go-redis/v9"
)

// 11.2: a spoofed penalty announcement opens nothing: Redis holds no
// penalty behind it. It is counted; a real penalty is passed on with the
// end stored in Redis; a burst of spoofs costs bounded work.
func TestSharedIgnoresSpoofedAnnouncements(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ev := newEvents()
	heard := make(chan limiter.Penalty, 16)
	a := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix, Share: 1, Timeout: 5 * time.Second},
		limiter.Listener{Event: ev.add, Penalty: func(group string, p limiter.Penalty) { heard <- p }})
	b := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix, Share: 1, Timeout: 5 * time.Second})
	c := srv.Client(t)
	ctx := context.Background()
	channel := a.Redis().Channel()
	spoofs := []string{
		"dingtalk\negress:default\n253402271999000000\nspoofed",             // an earlier release's format
		"v1 penalty\ndingtalk\negress:default\n253402271999000000\nspoofed", // this one's
	}
	// The subscription starts in the background: publish until heard.
	for _, msg := range spoofs {
		deadline := time.Now().Add(10 * time.Second)
		before := ev.count(announcementRejected)
		for ev.count(announcementRejected) == before {
			if time.Now().After(deadline) {
				t.Fatalf("spoof %q: never rejected", msg)
			}
			if err := c.Publish(ctx, channel, msg).Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ev.ch:
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	for _, msg := range []string{"garbage", "v1 penalty\nno-scope", "v1", "\x00\x01"} {
		if err := c.Publish(ctx, channel, msg).Err(); err != nil {
			t.Fatal(err)
		}
		ev.await(t, announcementRejected)
	}
	// A type this release does not know (a later one's) is not an error.
	if err := c.Publish(ctx, channel, "v1 something-new\nx"); err.Err() != nil {
		t.Fatal(err.Err())
	}
	// A burst of one spoof: confirmations of one scope share one read.
	const burst = 2000
	pipe := c.Pipeline()
	for i := 0; i < burst; i++ {
		pipe.Publish(ctx, channel, spoofs[1])
	}
	before := ev.count(announcementRejected)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// A real penalty, after the burst on the same channel, is confirmed.
	until := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	if err := b.Penalize(ctx, "dingtalk", limiter.Penalty{Scope: "api:/real", Until: until, Code: "88"}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-heard:
		if p.Scope != "api:/real" || !p.Until.Equal(until) || p.Code != "88" {
			t.Fatalf("passed on %+v, want the real penalty", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the real penalty was not passed on")
	}
	select {
	case p := <-heard:
		t.Fatalf("passed on %+v as well", p)
	default:
	}
	reads := ev.count(announcementRejected) - before
	t.Logf("burst of %d spoofed announcements: %d confirmation reads", burst, reads)
	if reads > burst {
		t.Errorf("%d confirmation reads for %d announcements", reads, burst)
	}
}

// A lift heard right after a penalty of the same scope does not hide the
// penalty: what Redis holds decides. The queue keeps the last word on a
// scope, and a lift queued over a real penalty (spoofed, or an operator's
// of an older one) used to drop it.
func TestLiftDoesNotHideAPenalty(t *testing.T) {
	srv := redistest.Start(t)
	prefix := limitertest.Group(t)
	heard := make(chan limiter.Penalty, 64)
	a := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix, Share: 1},
		limiter.Listener{Penalty: func(_ string, p limiter.Penalty) { heard <- p }})
	c := srv.Client(t)
	ctx := context.Background()
	channel := a.Redis().Channel()
	lift := "\x00lift\ng\napp"
	// The subscription starts in the background: announce until heard.
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	value := strconv.FormatInt(until.UnixMicro(), 10) + "|88"
	if err := c.Set(ctx, a.Redis().PenaltyKey("g", "app"), value, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	announce := "v1 penalty\ng\napp\n" + strconv.FormatInt(until.UnixMicro(), 10) + "\n88"
	for subscribed := false; !subscribed; {
		if err := c.Publish(ctx, channel, announce).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard:
			subscribed = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Each round: the penalty's announcement and a lift of its scope at
	// once, so that the lift is the last word queued.
	const rounds = 20
	for range rounds {
		pipe := c.Pipeline()
		pipe.Publish(ctx, channel, announce)
		pipe.Publish(ctx, channel, lift)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-heard:
			if p.Scope != "app" || !p.Until.Equal(until) {
				t.Fatalf("heard %+v", p)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a penalty in Redis, announced with a lift after it, was not passed on")
		}
	}
}

// holdConfirm holds the watcher's confirming read (a pipeline of the
// penalty key's GET and TIME) after Redis answered it, until released.
type holdConfirm struct {
	entered, release chan struct{}
	once             sync.Once
}

func (h *holdConfirm) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdConfirm) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *holdConfirm) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) == 2 && cmds[0].Name() == "get" && cmds[1].Name() == "time" {
			h.once.Do(func() {
				close(h.entered)
				<-h.release
			})
		}
		return err
	}
}

// A replica that lifts a penalty right after announcing it: its own
// confirmation of the announcement, which read the key before the lift
// took it, does not open the breakers again behind the lift (a lift at
// once after the penalty used to be undone on the lifting replica).
func TestOwnLiftNotUndoneByALateConfirmation(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	hold := &holdConfirm{entered: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(hold)
	var penalties atomic.Int32
	var lifts sync.Once
	heard := make(chan struct{})
	s := newShared(t, c, limiter.SharedConfig{Prefix: limitertest.Group(t), Share: 1},
		limiter.Listener{Penalty: func(string, limiter.Penalty) { penalties.Add(1) }, Lift: func(string, string) { lifts.Do(func() { close(heard) }) }})
	ctx := context.Background()
	if err := s.Penalize(ctx, "g", limiter.Penalty{Scope: "org:1", Until: time.Now().Add(time.Hour), Code: "429"}); err != nil {
		t.Fatal(err)
	}
	<-hold.entered // the confirmation read the key, and waits
	before := penalties.Load()
	if _, err := s.LiftPenalty(ctx, "g", "org:1"); err != nil {
		t.Fatal(err)
	}
	close(hold.release)
	// The watcher then hears the lift it announced: once it has, the held
	// confirmation was handled before it (one goroutine confirms in order).
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Fatal("the lift was not heard")
	}
	if n := penalties.Load() - before; n != 0 {
		t.Fatalf("%d penalty events after the lift, from a confirmation read before it; want none", n)
	}
}

// A lift heard is passed on only when its key is gone with the mark a lift
// leaves: after Redis lost its data (a restart without persistence, a
// FLUSHALL), one lift message from anyone allowed to publish must not end
// a penalty every replica still holds. A real lift of the same scope then
// is passed on.
func TestHeardLiftNeedsItsMark(t *testing.T) {
	srv := redistest.Start(t)
	prefix := limitertest.Group(t)
	ev := newEvents()
	heard := make(chan limiter.Penalty, 64)
	lifted := make(chan string, 64)
	a := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix, Share: 1},
		limiter.Listener{Event: ev.add,
			Penalty: func(_ string, p limiter.Penalty) { heard <- p },
			Lift:    func(_, scope string) { lifted <- scope }})
	b := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix, Share: 1})
	c := srv.Client(t)
	ctx := context.Background()
	channel := a.Redis().Channel()
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	value := strconv.FormatInt(until.UnixMicro(), 10) + "|88"
	key := a.Redis().PenaltyKey("g", "app")
	if err := c.Set(ctx, key, value, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	announce := "v1 penalty\ng\napp\n" + strconv.FormatInt(until.UnixMicro(), 10) + "\n88"
	// The subscription starts in the background: announce until heard.
	for subscribed := false; !subscribed; {
		if err := c.Publish(ctx, channel, announce).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard:
			subscribed = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The state is lost: the key goes without a lift's mark.
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, channel, "v1 lift\ng\napp").Err(); err != nil {
		t.Fatal(err)
	}
	ev.await(t, announcementRejected)
	select {
	case scope := <-lifted:
		t.Fatalf("a lift of %q with no mark in Redis was passed on", scope)
	default:
	}
	if _, err := b.LiftPenalty(ctx, "g", "app"); err != nil {
		t.Fatal(err)
	}
	select {
	case scope := <-lifted:
		if scope != "app" {
			t.Fatalf("lifted %q, want app", scope)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a real lift, its mark in Redis, was not passed on")
	}
}
