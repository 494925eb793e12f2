package throttle_test

// Leak checks: no goroutine outlives a Transport that was closed, dropped,
// cancelled in the middle of a wait or of a retry backoff; and the keys a
// run leaves in Redis expire by themselves once the traffic stops.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// The DingTalk calls of the leak and soak runs: one API of each generation.
const (
	dtOldPath = "/topapi/v2/user/get"
	dtNewPath = "/v1.0/contact/users/manager4220"
)

// dtTarget is a DingTalk emulator with one app whose token the calls carry.
type dtTarget struct {
	emu   *dingtalktest.Server
	app   string
	token string
}

func newDTTarget(t *testing.T, opts dingtalktest.Options) *dtTarget {
	t.Helper()
	app := "ding" + limitertest.Group(t)
	tg := &dtTarget{app: app, token: "tok-" + app}
	opts.Tokens = map[string]string{tg.token: app}
	tg.emu = dingtalktest.New(opts)
	t.Cleanup(tg.emu.Close)
	return tg
}

// profile is the DingTalk preset for the target's app, pointed at the
// emulator.
func (tg *dtTarget) profile(cfg dingtalk.Config) providers.Profile {
	cfg.Apps[0].AppKey, cfg.Hosts = tg.app, []string{tg.emu.Host()}
	return dingtalk.MustNew(cfg).Profile()
}

// call sends one DingTalk call of path through c, as an SDK would, and
// drains the answer.
func (tg *dtTarget) call(ctx context.Context, c *http.Client, path string) (*http.Response, error) {
	var req *http.Request
	if strings.HasPrefix(path, "/v1.0/") {
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, tg.emu.URL+path, nil)
		req.Header.Set("x-acs-dingtalk-access-token", tg.token)
	} else {
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, tg.emu.URL+path+"?access_token="+tg.token,
			strings.NewReader(`{"userid":"manager4220"}`))
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

var quiet = slog.New(slog.DiscardHandler)

func isOneOf(err error, targets []error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// hammer calls both APIs from workers goroutines per API until stop, and
// fails the test on any error other than a refusal by the limiter
// (ErrThrottled, or one of allowed) or the end of the run.
func hammer(t *testing.T, tg *dtTarget, c *http.Client, workers int, stop time.Time, allowed ...error) {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), stop)
	defer cancel()
	var wg sync.WaitGroup
	for _, path := range []string{dtOldPath, dtNewPath} {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					_, err := tg.call(ctx, c, path)
					if err != nil && !errors.Is(err, throttle.ErrThrottled) && !isOneOf(err, allowed) && ctx.Err() == nil {
						t.Errorf("%s: %v", path, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
}

// verifyNoLeaks checks, after every other cleanup of the test has run,
// that no goroutine started since the call survives. Call it first, after
// starting what the package shares (the Redis server).
func verifyNoLeaks(t *testing.T) goleak.Option {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	// The limiter's fine waker is one goroutine per process, started by
	// the first wait and ended after it has been idle for a while: it is
	// bounded, not leaked, and may outlive the test by that while.
	waker := goleak.IgnoreTopFunction("github.com/quotaware/throttle/limiter.(*fineWaker).run")
	// Cleanups run last-registered first: this one runs after every
	// client, server and Transport of the test is closed.
	t.Cleanup(func() { goleak.VerifyNone(t, ignore, waker) })
	return ignore
}

// A Transport on Redis, closed after a run at several times the limit
// (waits, refusals, cancellations at the deadline), leaves no goroutine:
// the replica registry's beat stops with Close.
func TestLeakNoGoroutineAfterClose(t *testing.T) {
	srv := redistest.Shared(t)
	verifyNoLeaks(t)
	tg := newDTTarget(t, dingtalktest.Options{LatencyMax: 10 * time.Millisecond})
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr := throttle.MustNew(sharedOpt(t, srv.Client(t), limiter.SharedConfig{Prefix: limitertest.Group(t)}),
		throttle.WithProfiles(tg.profile(dingtalk.Config{Apps: []dingtalk.App{{}}})), throttle.WithBase(base),
		throttle.WithMaxWait(300*time.Millisecond), throttle.WithLogger(quiet), throttle.WithoutTelemetry())
	t.Cleanup(func() { tr.Close() })
	if n := countRegistryBeats(); n == 0 {
		t.Fatal("no registry goroutine is running: this test would prove nothing")
	}
	hammer(t, tg, &http.Client{Transport: tr}, 4, time.Now().Add(time.Second))
	if st := tg.emu.Stats(); st.Requests == 0 || st.Rejected != 0 {
		t.Fatalf("emulator stats %+v: want calls and no rejection", st)
	}
}

// A Transport dropped without Close stops beating once it is garbage: its
// registry goroutine ends when the runtime runs its cleanup.
func TestLeakNoGoroutineAfterDrop(t *testing.T) {
	srv := redistest.Shared(t)
	verifyNoLeaks(t)
	tg := newDTTarget(t, dingtalktest.Options{})
	rdb := srv.Client(t)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	before := registryBeats()
	func() {
		tr := throttle.MustNew(sharedOpt(t, rdb, limiter.SharedConfig{Prefix: limitertest.Group(t)}),
			throttle.WithProfiles(tg.profile(dingtalk.Config{Apps: []dingtalk.App{{}}})), throttle.WithBase(base),
			throttle.WithLogger(quiet), throttle.WithoutTelemetry())
		c := &http.Client{Transport: tr}
		for range 3 {
			if _, err := tg.call(context.Background(), c, dtNewPath); err != nil {
				t.Fatal(err)
			}
		}
	}()
	var mine []string
	for _, id := range registryBeats() {
		if !contains(before, id) {
			mine = append(mine, id)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("%d new registry goroutines, want the dropped Transport's one", len(mine))
	}
	// Collect until the cleanup has run; polling with a deadline, since
	// nothing signals the end of a runtime cleanup.
	deadline := time.Now().Add(10 * time.Second)
	for contains(registryBeats(), mine[0]) {
		if time.Now().After(deadline) {
			t.Fatalf("goroutine %s (the registry beat of a dropped Transport) still runs after 10s of GC", mine[0])
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// registryBeats returns the ids of the goroutines running a replica
// registry's beat loop.
func registryBeats() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var ids []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "created by github.com/quotaware/throttle/limiter.startRegistry") {
			continue
		}
		head, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
		ids = append(ids, head)
	}
	return ids
}

func countRegistryBeats() int { return len(registryBeats()) }

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// Callers cancelled while they wait for booked slots return at once, send
// nothing, and leave no goroutine behind (each wait's timer is stopped, and
// the slot handed back to Redis on a context of its own).
func TestLeakNoGoroutineAfterCancelledWaits(t *testing.T) {
	srv := redistest.Shared(t)
	verifyNoLeaks(t)
	rec := &recorder{}
	httpSrv := serve(t, rec)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	red, err := newSharedOnly(t, srv.Client(t), limitertest.Group(t))
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 8
	lim := &observed{Limiter: red, reserved: make(chan limiter.Reservation, waiters+1)}
	c := &http.Client{Transport: throttle.MustNew(throttle.WithLimiter(lim), throttle.WithBase(base),
		throttle.WithProfiles(testProfile("p", mustRule(t, 1, 2*time.Second))),
		throttle.WithMaxWait(time.Minute), throttle.WithoutTelemetry())}
	if _, err := get(context.Background(), c, httpSrv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	<-lim.reserved
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := get(ctx, c, httpSrv.URL+"/a")
			errs <- err
		}()
	}
	var latest time.Duration
	for range waiters {
		res := <-lim.reserved
		if !res.OK() || res.Delay() <= 0 {
			t.Fatalf("reservation %+v, want a slot booked ahead", res)
		}
		latest = max(latest, res.Delay())
	}
	cancelled := time.Now()
	cancel()
	for range waiters {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	}
	took := time.Since(cancelled)
	t.Logf("%d callers waiting up to %v for their slots returned %v after the cancel", waiters, latest.Round(time.Millisecond), took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("cancelled waits took %v to return, the slots were %v ahead: the waits did not end with the context", took, latest)
	}
	if n := len(rec.seen()); n != 1 {
		t.Errorf("server saw %d requests, want only the first", n)
	}
}

// signalling reports each answer the base transport returns.
type signalling struct {
	base     http.RoundTripper
	answered chan struct{}
}

func (s *signalling) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(req)
	select {
	case s.answered <- struct{}{}:
	default:
	}
	return resp, err
}

// Retries leave no goroutine behind: a call that is retried to success, and
// a call cancelled during its backoff, which returns at once.
func TestLeakNoGoroutineAfterRetries(t *testing.T) {
	redistest.Shared(t) // nothing here uses it; started first so that it is no leak
	verifyNoLeaks(t)
	tg := newDTTarget(t, dingtalktest.Options{})
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	sig := &signalling{base: base, answered: make(chan struct{}, 1)}
	newClient := func(p throttle.RetryPolicy) *http.Client {
		return &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(tg.profile(dingtalk.Config{Apps: []dingtalk.App{{}}})),
			throttle.WithBase(sig), throttle.WithRetry(p), throttle.WithMaxWait(time.Minute),
			throttle.WithLogger(quiet), throttle.WithoutTelemetry())}
	}

	// "System busy" twice, then an answer: three attempts.
	fast := newClient(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	tg.emu.ForceBusy(2)
	resp, err := tg.call(context.Background(), fast, dtOldPath)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("retried call: %v", err)
	}
	if st := tg.emu.Stats(); st.Requests != 3 || st.Injected != 2 {
		t.Fatalf("emulator stats %+v, want 3 calls, 2 of them busy", st)
	}

	// Busy, then a 30s backoff cancelled after the first answer.
	slow := newClient(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: 30 * time.Second, MaxBackoff: 30 * time.Second})
	tg.emu.ForceBusy(1)
	select { // forget the answers of the first call
	case <-sig.answered:
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := tg.call(ctx, slow, dtOldPath)
		errc <- err
	}()
	<-sig.answered
	// Cancel once the call is parked in its backoff: cancelled before the
	// retry decision, the call would rightly end with the busy answer.
	waitFor(t, 5*time.Second, inBackoff)
	cancelled := time.Now()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if took := time.Since(cancelled); took > time.Second {
		t.Errorf("the call cancelled in its 30s backoff returned after %v", took)
	}
	if st := tg.emu.Stats(); st.Requests != 4 {
		t.Errorf("emulator saw %d calls, want 4: the cancelled backoff sent again", st.Requests)
	}
}

// inBackoff reports whether a goroutine is parked in the retry client's
// backoff: blocked in the timer wait (sleepCtx) that the retry loop called.
func inBackoff() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		_, frames, _ := strings.Cut(g, "\n")
		if strings.HasPrefix(g, "goroutine ") && strings.Contains(g, "[select") &&
			strings.HasPrefix(frames, "github.com/quotaware/throttle.sleepCtx(") &&
			strings.Contains(frames, "github.com/quotaware/throttle.(*retrier).do(") {
			return true
		}
	}
	return false
}

// After a run, the keys of the run's group expire by themselves: every
// paced rule's key once its last booked slot has passed (at most MaxWait
// plus the rule's period after the last call), every penalty at its end.
// Only the monthly quota's calendar key stays, because its window (the
// month in Beijing time) is still running: it must expire exactly at the
// window's end.
func TestLeakIdleKeysExpire(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := limitertest.Group(t)
	tg := newDTTarget(t, dingtalktest.Options{})
	const maxWait = time.Second
	// The per-IP rule's period is cut from 20s to 2s so the test need not
	// wait 20s; it is still the longest paced rule.
	cfg := dingtalk.Config{EgressLimit: 1000, EgressPeriod: 2 * time.Second, Apps: []dingtalk.App{{}}}
	longest := cfg.EgressPeriod + 50*time.Millisecond
	var trs []*throttle.Transport
	for range 2 {
		base := &http.Transport{}
		t.Cleanup(base.CloseIdleConnections)
		tr := throttle.MustNew(sharedOpt(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix}),
			throttle.WithProfiles(tg.profile(cfg)), throttle.WithBase(base), throttle.WithMaxWait(maxWait),
			throttle.WithoutRetry(), throttle.WithLogger(quiet), throttle.WithoutTelemetry())
		trs = append(trs, tr)
	}
	// One quota answer leaves a penalty key too, until the end it states.
	penaltyEnd := time.Now().Add(2 * time.Second).Truncate(time.Second)
	tg.emu.FailNext(1, http.StatusOK, `{"errcode":90018,"errmsg":"当前应用调用该接口的频率已超过限制, 处罚将在 `+
		penaltyEnd.In(beijing).Format(time.DateTime)+` 结束."}`)
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for _, tr := range trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hammer(t, tg, &http.Client{Transport: tr}, 3, stop, throttle.ErrPenalized)
		}()
	}
	// The keys in use, seen while the run is busy (paced keys last only
	// until their last booked slot, so after the run they may be gone):
	// every key seen in scans every 50ms until the run stops.
	ctx := context.Background()
	group := "{" + prefix + ":" + dingtalk.Name + "}:*"
	seen := map[string]bool{}
	for tick := time.NewTicker(50 * time.Millisecond); time.Now().Before(stop); <-tick.C {
		for _, k := range scanKeys(t, rdb, group) {
			seen[k] = true
		}
	}
	var after []string
	for k := range seen {
		after = append(after, k)
	}
	wg.Wait()
	for _, tr := range trs {
		tr.Close()
	}
	ended := time.Now()
	registry := scanKeys(t, rdb, "{"+prefix+":registry}*")
	t.Logf("during the run: %d keys in the group %s: %s; registry keys after: %v", len(after), group, strings.Join(after, ", "), registry)
	monthKey := "{" + prefix + ":" + dingtalk.Name + "}:r:month:" + tg.app
	// The catalogue describes the calendar rules for throttlectl and lives
	// exactly as long as they do.
	catalogKey := "{" + prefix + ":" + dingtalk.Name + "}:rules"
	kinds := map[string]int{}
	for _, k := range after {
		if k != monthKey && k != catalogKey {
			_, rest, _ := strings.Cut(k, "}:")
			kinds[rest[:1]]++
		}
	}
	if kinds["r"] < 1 || kinds["p"] != 1 || !contains(after, monthKey) {
		t.Fatalf("keys %v: want paced rules, the penalty and the month's key, or the test proves nothing", after)
	}
	if len(registry) != 0 {
		t.Errorf("registry keys %v remain after every Transport closed", registry)
	}

	// Wait out the longest paced period plus MaxWait (how far ahead a slot
	// may be booked), or the penalty if it ends later, with a margin.
	wait := max(longest+maxWait, penaltyEnd.Sub(ended)) + 500*time.Millisecond
	<-time.After(time.Until(ended.Add(wait)))
	left := scanKeys(t, rdb, group)
	t.Logf("%v after the run: %d keys: %s", wait, len(left), strings.Join(left, ", "))
	for _, k := range left {
		if k != monthKey && k != catalogKey {
			t.Errorf("key %s outlived the idle period (PTTL %v)", k, rdb.PTTL(ctx, k).Val())
		}
	}
	if d := rdb.PTTL(ctx, catalogKey).Val() - rdb.PTTL(ctx, monthKey).Val(); d > 2*time.Second {
		t.Errorf("the catalogue outlives the month's key by %v", d)
	}
	if !contains(left, monthKey) {
		t.Fatalf("the monthly quota key %s is gone, but its month is still running", monthKey)
	}
	// The calendar key lives exactly until its window ends: the 1st of next
	// month, Beijing time, plus the preset's grace.
	pttl := rdb.PTTL(ctx, monthKey).Val()
	want := time.Until(nextMonth(time.Now()).Add(5 * time.Second))
	t.Logf("calendar key %s expires in %v; its window ends in %v", monthKey, pttl.Round(time.Second), want.Round(time.Second))
	if d := pttl - want; d < -2*time.Second || d > 2*time.Second {
		t.Errorf("calendar key expires in %v, want at the end of its window, in %v", pttl, want)
	}
}

// scanKeys lists the keys matching pattern, sorted.
func scanKeys(t *testing.T, rdb *redis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	iter := rdb.Scan(context.Background(), 0, pattern, 100).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}
