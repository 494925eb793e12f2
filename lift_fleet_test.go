package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers"
)

// A lift announced while a replica's subscription is being made again (a
// network blip, a failover, a killed client) reaches it all the same: once
// subscribed again it re-reads the penalties it knows, and calls the scope
// again. It used to refuse the scope until the penalty's end (an hour here,
// up to a month for a monthly quota) while every other replica called it.
// With Redis slow when the subscription comes back (200 ms each way: the
// first re-read, which must dial again, runs out of time) the re-read is
// asked again until every key answered; one try used to be all.
func TestLiftMissedDuringResubscribeStillHeard(t *testing.T) {
	for _, slow := range []time.Duration{0, 200 * time.Millisecond} {
		t.Run(slow.String(), func(t *testing.T) { liftMissedDuringResubscribe(t, slow) })
	}
}

func liftMissedDuringResubscribe(t *testing.T, slow time.Duration) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	var refuse atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Swap(false) {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(api.Close)
	replica := func(addr string) (*throttle.Transport, *http.Client) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		tr := throttle.MustNew(throttle.WithProfiles(dailyProfile(t, api.Listener.Addr().String())), throttle.WithRedis(rdb),
			throttle.WithoutRetry(), throttle.WithoutTelemetry(), throttle.WithLogger(quiet))
		t.Cleanup(func() { tr.Close() })
		return tr, &http.Client{Transport: tr}
	}
	a, ca := replica(srv.Addr)
	_, cb := replica(proxy.Addr()) // B reaches Redis through the proxy
	call := func(c *http.Client) error {
		resp, err := c.Get(api.URL + "/?org=1")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	refuse.Store(true)
	if err := call(ca); err != nil {
		t.Fatal(err) // the 429 that penalises org:1 for an hour
	}
	waitFor(t, 5*time.Second, func() bool { return errors.Is(call(cb), throttle.ErrPenalized) }) // B heard it

	// B's connections drop and the new ones hang: its subscription is not
	// in place while the lift is announced.
	proxy.Stall()
	proxy.ResetAll()
	if err := a.LiftPenalty(context.Background(), "daily", "org:1"); err != nil {
		t.Fatal(err)
	}
	if err := call(ca); err != nil {
		t.Fatalf("A after the lift: %v", err)
	}
	proxy.SetLatency(slow)
	proxy.Resume()
	if slow > 0 {
		resumed := time.Now()
		waitFor(t, 5*time.Second, func() bool { return time.Since(resumed) > 1500*time.Millisecond }) // the slow spell
		proxy.SetLatency(0)
	}
	waitFor(t, 5*time.Second, func() bool { return call(cb) == nil }) // B calls the lifted scope again
}

// A reserve whose reply read a penalty before the penalty was lifted does
// not open the breaker again when the reply comes after the lift: the
// request asks again and goes. Before, the stale reply shut the scope on
// this replica for the penalty's whole end (an hour here, up to a month),
// right after the operator lifted it.
func TestReplyReadBeforeALiftOpensNoBreaker(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	t.Cleanup(proxy.Resume)
	api := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(api.Close)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	tr := throttle.MustNew(throttle.WithProfiles(dailyProfile(t, api.Listener.Addr().String())), throttle.WithRedis(rdb),
		throttle.WithoutRetry(), throttle.WithoutTelemetry(), throttle.WithLogger(quiet))
	t.Cleanup(func() { tr.Close() })
	client := &http.Client{Transport: tr}
	call := func(org string) error {
		resp, err := client.Get(api.URL + "/?org=" + org)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := call("2"); err != nil {
		t.Fatal(err) // the scripts loaded: each later call is one round trip
	}
	// A penalty on org:1 that this replica has not heard of (written as
	// another replica's write whose announcement it missed).
	ctx := context.Background()
	end := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	if err := srv.Client(t).Set(ctx, "{throttle:daily}:p:org:1", end+"|429", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	// The reserve reads it; its reply is held until after the lift.
	proxy.HoldRepliesAfter([]byte("day:org1"))
	done := make(chan error, 1)
	go func() { done <- call("1") }()
	for deadline := time.Now().Add(10 * time.Second); proxy.Holding() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the reserve never reached Redis in 10s")
		}
		time.Sleep(5 * time.Millisecond) // polls the proxy's state
	}
	if err := tr.LiftPenalty(ctx, "daily", "org:1"); err != nil {
		t.Fatal(err)
	}
	proxy.Resume()
	if err := <-done; err != nil {
		t.Fatalf("the call whose reserve read the penalty before its lift: %v, want it sent", err)
	}
	if err := call("1"); err != nil {
		t.Fatalf("the next call after the lift: %v", err)
	}
}

// A replica that re-reads the penalties it knows after its subscription
// comes back tells a lift from a loss of Redis's data: a penalty key gone
// with the mark a lift leaves is lifted, one gone without it (a restart
// without persistence, a FLUSHALL) keeps its breaker open. Before, every
// penalty of a Redis that lost its data was read as lifted, and every
// replica called each penalised scope again at once.
func TestLostStateIsNoLift(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	t.Cleanup(proxy.Resume)
	var refuse atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Swap(false) {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(api.Close)
	host := api.Listener.Addr().String()
	profile := providers.Profile{
		Name:  "orgs",
		Match: func(r *http.Request) bool { return r.URL.Host == host },
		Route: func(r *http.Request) (providers.Route, error) {
			return providers.Route{API: "/", Scopes: []string{"org:" + r.URL.Query().Get("org")}}, nil
		},
		Classify: func(r *http.Request, resp *http.Response, _ *providers.Route) providers.Verdict {
			if resp.StatusCode == http.StatusTooManyRequests {
				return providers.Verdict{Kind: providers.Quota, Scope: "org:" + r.URL.Query().Get("org"), Until: time.Now().Add(time.Hour), Code: "429"}
			}
			return providers.Verdict{}
		},
	}
	replica := func(addr string) (*throttle.Transport, func(org string) error) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		tr := throttle.MustNew(throttle.WithProfiles(profile), throttle.WithRedis(rdb),
			throttle.WithoutRetry(), throttle.WithoutTelemetry(), throttle.WithLogger(quiet))
		t.Cleanup(func() { tr.Close() })
		c := &http.Client{Transport: tr}
		return tr, func(org string) error {
			resp, err := c.Get(api.URL + "/?org=" + org)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
	}
	a, callA := replica(srv.Addr)
	_, callB := replica(proxy.Addr()) // B reaches Redis through the proxy
	for _, org := range []string{"1", "2"} {
		refuse.Store(true)
		if err := callA(org); err != nil {
			t.Fatal(err) // the 429 that penalises the org for an hour
		}
		waitFor(t, 5*time.Second, func() bool { return errors.Is(callB(org), throttle.ErrPenalized) }) // B heard it
	}

	// While B's subscription is away, Redis loses its data, and then org:2
	// is lifted (its penalty gone already: the lift leaves its mark).
	proxy.Stall()
	proxy.ResetAll()
	if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.LiftPenalty(context.Background(), "orgs", "org:2"); err != nil {
		t.Fatal(err)
	}
	proxy.Resume()
	// One re-read of both keys: org:2 lifted, org:1 lost and still shut.
	waitFor(t, 10*time.Second, func() bool { return callB("2") == nil })
	if err := callB("1"); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("org:1, whose penalty went with Redis's data: %v, want it still penalised", err)
	}
}
