package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
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
