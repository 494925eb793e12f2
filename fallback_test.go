package throttle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/redis/go-redis/v9"
)

// replicaRecorder records arrivals per replica (the X-Replica header).
type replicaRecorder struct {
	mu  sync.Mutex
	per map[string][]time.Time
}

func (r *replicaRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.per[req.Header.Get("X-Replica")] = append(r.per[req.Header.Get("X-Replica")], time.Now())
	r.mu.Unlock()
	io.WriteString(w, "{}")
}

func (r *replicaRecorder) between(replica string, from, to time.Time) (out []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.per[replica] {
		if !at.Before(from) && at.Before(to) {
			out = append(out, at)
		}
	}
	return out
}

// Redis dies in the middle of a run: the calls go on, each replica under its
// local share of the rule; Redis comes back: the replicas share it again by
// themselves.
func TestRedisOutageFallsBackToLocalShare(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of Redis faults or load: make test runs it, make test-short does not")
	}
	srv := redistest.Start(t)
	rec := &replicaRecorder{per: make(map[string][]time.Time)}
	httpSrv := serve(t, nil)
	httpSrv.Config.Handler = rec
	group := limitertest.Group(t)
	rule := mustRule(t, 30, 1100*time.Millisecond) // 30 per second with 100ms of headroom
	const replicas = 3
	clients := make([]*http.Client, replicas)
	for i := range clients {
		tr := throttle.MustNew(throttle.WithProfiles(testProfile(group, rule)),
			throttle.WithoutTelemetry(), throttle.WithoutRetry(),
			sharedOpt(t, srv.Client(t), limiter.SharedConfig{Share: 1.0 / replicas, Timeout: 200 * time.Millisecond, Probe: 200 * time.Millisecond, Recover: 200 * time.Millisecond}))
		t.Cleanup(func() { tr.Close() })
		clients[i] = &http.Client{Transport: tr}
	}
	var (
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		errsMu  sync.Mutex
		otherEr []error
	)
	for i, c := range clients {
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest(http.MethodGet, httpSrv.URL+"/api", nil)
					req.Header.Set("X-Replica", string(rune('a'+i)))
					resp, err := c.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					} else if !errors.Is(err, throttle.ErrThrottled) {
						errsMu.Lock()
						otherEr = append(otherEr, err)
						errsMu.Unlock()
					}
				}
			}()
		}
	}
	// Let the shared phase run, then kill Redis.
	shared := time.Now()
	waitFor(t, 5*time.Second, func() bool { return len(rec.between("a", shared, time.Now())) >= 10 })
	killed := time.Now()
	srv.Stop()
	// Long enough for the local shares to run: after the switch, local
	// slots wait one period (1.1s) past the last Redis slot.
	waitFor(t, 10*time.Second, func() bool { return time.Since(killed) > 3500*time.Millisecond })
	restarting := time.Now() // replicas may be back before Restart returns
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// Shared again: the restarted (empty) Redis gets the rule's key back.
	key := "{throttle:" + group + "}:r:r"
	check := srv.Client(t)
	waitFor(t, 5*time.Second, func() bool { return check.Exists(context.Background(), key).Val() == 1 })
	backAfter := time.Since(restarted)
	waitFor(t, 10*time.Second, func() bool { return time.Since(restarted) > backAfter+3*time.Second })
	close(stop)
	wg.Wait()
	end := time.Now()

	if len(otherEr) > 0 {
		t.Fatalf("%d calls failed during the outage, e.g. %v", len(otherEr), otherEr[0])
	}
	// Slots booked before a switch are still sent after it: 4 waiters per
	// replica book at most ~0.5s ahead. Past that, during the outage each
	// replica keeps its share: 10 per 1.1s, so at most 10 in any second.
	const inFlight = 600 * time.Millisecond
	var total []time.Time
	for i := 0; i < replicas; i++ {
		got := rec.between(string(rune('a'+i)), killed.Add(inFlight), restarting)
		if most, at := limitertest.MaxInWindow(got, time.Second); most > 10 {
			t.Errorf("replica %d: %d arrivals in the second from %v during the outage, share is 10", i, most, at.Format(time.StampMicro))
		}
		if len(got) < 10 {
			t.Errorf("replica %d sent only %d requests in the outage: the fallback starves it", i, len(got))
		}
		// Every replica is back once its probes (200ms apart) have found
		// Redis answering for Recover (200ms; at once after the first
		// replica back announces it) and its local bookings have gone out.
		total = append(total, rec.between(string(rune('a'+i)), restarted.Add(backAfter+2*200*time.Millisecond+inFlight), end)...)
	}
	// Back on Redis: the replicas share the whole rule again.
	sortTimes(total)
	if most, at := limitertest.MaxInWindow(total, time.Second); most > 30 {
		t.Errorf("%d arrivals in the second from %v after recovery, want at most 30", most, at.Format(time.StampMicro))
	}
	t.Logf("back on Redis %v after the restart", backAfter.Round(time.Millisecond))
}

// Fail closed: while Redis is away, requests fail at once with an error that
// names Redis, and nothing is sent.
func TestRedisOutageFailClosed(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	httpSrv := serve(t, rec)
	c := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(testProfile(limitertest.Group(t), mustRule(t, 100, time.Second))),
		sharedOpt(t, srv.Client(t), limiter.SharedConfig{Mode: limiter.OutageRefuse, Timeout: 200 * time.Millisecond, Probe: time.Second}))}
	if _, err := get(context.Background(), c, httpSrv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err := get(context.Background(), c, httpSrv.URL+"/a")
	if !errors.Is(err, throttle.ErrLimiterUnavailable) || !errors.Is(err, limiter.ErrUnavailable) || !strings.Contains(err.Error(), "redis") {
		t.Fatalf("err = %v, want ErrLimiterUnavailable naming redis", err)
	}
	var le *throttle.LimiterError
	if !errors.As(err, &le) || le.API != "/a" || !errors.Is(le.Err, limiter.ErrUnavailable) {
		t.Fatalf("err = %#v, want a *LimiterError of /a wrapping the limiter's error", err)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

// Fail open: while Redis is away, requests go unlimited.
func TestRedisOutageFailOpen(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	httpSrv := serve(t, rec)
	c := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(testProfile(limitertest.Group(t), mustRule(t, 1, time.Hour))),
		sharedOpt(t, srv.Client(t), limiter.SharedConfig{Mode: limiter.OutageAdmit, Timeout: 200 * time.Millisecond, Probe: time.Hour}))}
	srv.Stop()
	for i := 0; i < 5; i++ {
		if _, err := get(context.Background(), c, httpSrv.URL+"/a"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if n := len(rec.seen()); n != 5 {
		t.Fatalf("server saw %d requests, want 5", n)
	}
}

// waitFor polls an outside condition (a process, a clock) until it holds.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// sharedOpt is WithLimiter with a Shared limiter on client built from cfg,
// as a user who needs settings other than WithRedis's defaults writes it.
func sharedOpt(t testing.TB, client redis.UniversalClient, cfg limiter.SharedConfig) throttle.Option {
	t.Helper()
	s, err := limiter.NewShared(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return throttle.WithLimiter(s)
}
