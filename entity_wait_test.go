package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// entityProfile limits every request by a shared rule and by a narrow rule
// of its entity (the first path segment) that never books ahead, the shape
// of a per-chat or per-member limit.
func entityProfile(t testing.TB, entityPeriod time.Duration) providers.Profile {
	t.Helper()
	shared := rule.Must(rule.New("shared", 100, time.Second))
	entity := rule.Must(rule.New("entity", 1, entityPeriod, rule.WithMaxBookAhead(0)))
	p := testProfile("p")
	p.Route = func(r *http.Request) (providers.Route, error) {
		name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		narrow, err := entity.WithKey("entity:" + name)
		if err != nil {
			return providers.Route{}, err
		}
		return providers.Route{API: "send", Rules: []rule.Rule{shared, narrow}, Scopes: []string{"api:send"}}, nil
	}
	return p
}

// A request held back by its entity's capped rule is refused uncharged,
// waits for the entity's slot and asks again: it is sent, not failed.
func TestHeldBackRequestWaitsForItsEntitySlot(t *testing.T) {
	rec := &recorder{}
	srv := serve(t, rec)
	const period = 300 * time.Millisecond
	lim := &observed{Limiter: limiter.NewMemory(), reserved: make(chan limiter.Reservation, 10)}
	c := &http.Client{Transport: throttle.MustNew(throttle.WithLimiter(lim),
		throttle.WithProfiles(entityProfile(t, period)), throttle.WithMaxWait(5*time.Second))}
	for i := 0; i < 2; i++ {
		if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	first, refused, retried := <-lim.reserved, <-lim.reserved, <-lim.reserved
	if !first.OK() || refused.OK() || refused.Rule() != 1 || !retried.OK() {
		t.Fatalf("reservations %+v, %+v, %+v: want admitted, refused by the entity rule, admitted", first, refused, retried)
	}
	if got, want := retried.SendAt(), first.SendAt().Add(period); got.Before(want) {
		t.Errorf("retry sent at %v, before the entity's slot %v", got.Format(time.StampMicro), want.Format(time.StampMicro))
	}
	if n := len(rec.seen()); n != 2 {
		t.Fatalf("server saw %d requests, want 2", n)
	}
}

// When the entity's slot lies beyond the request's budget it fails at once
// with ErrThrottled, naming the entity rule, and nothing is sent.
func TestHeldBackBeyondBudgetFailsAtOnce(t *testing.T) {
	rec := &recorder{}
	srv := serve(t, rec)
	c := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(entityProfile(t, 10*time.Second)),
		throttle.WithMaxWait(time.Second))}
	if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err := get(context.Background(), c, srv.URL+"/a")
	if elapsed := time.Since(began); elapsed >= time.Second {
		t.Errorf("took %v: it waited out its budget instead of failing at once", elapsed)
	}
	var terr *throttle.ThrottledError
	if !errors.Is(err, throttle.ErrThrottled) || !errors.As(err, &terr) {
		t.Fatalf("err = %v, want a ThrottledError", err)
	}
	if !strings.Contains(terr.Rule, "entity:a") || terr.RetryAfter <= time.Second {
		t.Errorf("Rule %q, RetryAfter %v: want the entity rule and its ~10s slot", terr.Rule, terr.RetryAfter)
	}
	// The other entity is not held back.
	if _, err := get(context.Background(), c, srv.URL+"/b"); err != nil {
		t.Fatalf("entity b: %v", err)
	}
	if n := len(rec.seen()); n != 2 {
		t.Fatalf("server saw %d requests, want 2", n)
	}
}

// Cancelling while waiting for the entity's slot returns at once with the
// context's error; nothing was booked, so nothing is given back.
func TestCancelWhileHeldBack(t *testing.T) {
	rec := &recorder{}
	srv := serve(t, rec)
	lim := &observed{Limiter: limiter.NewMemory(), reserved: make(chan limiter.Reservation, 10), cancelled: make(chan limiter.Reservation, 10)}
	c := &http.Client{Transport: throttle.MustNew(throttle.WithLimiter(lim),
		throttle.WithProfiles(entityProfile(t, 10*time.Second)), throttle.WithMaxWait(30*time.Second))}
	if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	<-lim.reserved
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := get(ctx, c, srv.URL+"/a")
		done <- err
	}()
	if held := <-lim.reserved; held.OK() || held.Rule() != 1 {
		t.Fatalf("second request: %+v, want refused by the entity rule", held)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := len(lim.cancelled); n != 0 {
		t.Errorf("%d slots given back, want none: the refusal booked nothing", n)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

// A wait for the entity's slot is an event on the request's span, with no
// rule key (it names the entity) among its attributes.
func TestHeldBackWaitIsASpanEvent(t *testing.T) {
	o := newObservability(t)
	rec := &recorder{}
	srv := serve(t, rec)
	opts := append(o.opts, throttle.WithProfiles(entityProfile(t, 100*time.Millisecond)), throttle.WithMaxWait(5*time.Second))
	c := &http.Client{Transport: throttle.MustNew(opts...)}
	for i := 0; i < 2; i++ {
		if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	var events []string
	for _, s := range o.spans.GetSpans() {
		for _, ev := range s.Events {
			events = append(events, ev.Name)
			for _, a := range ev.Attributes {
				if strings.Contains(a.Value.Emit(), "entity:") {
					t.Errorf("event %s carries the rule key: %v", ev.Name, a)
				}
			}
		}
	}
	if len(events) != 1 || events[0] != "throttle.entity_wait" {
		t.Fatalf("span events %v, want one throttle.entity_wait", events)
	}
}
