package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// Main runs the package's tests and stops the shared redis-server the
// replicas used. Call it from TestMain.
func Main(m *testing.M) { redistest.Main(m) }

// Replicas returns n clients, each the front of one replica of a service:
// its own Transport, connection pool and go-redis client, all on the
// package's shared redis-server under a key prefix of the test's own. opts
// say what the replicas call (throttle.WithProfiles); every replica waits
// at most 2 s for a slot, gives Redis 2 s to answer (see Shared) and logs
// nothing. Everything is closed at the
// test's cleanup.
func Replicas(t *testing.T, n int, opts ...throttle.Option) []*http.Client {
	t.Helper()
	return ReplicasWith(t, n, nil, opts...)
}

// ReplicasWith is Replicas where each(i, client, prefix), when not nil,
// adds options of replica i's own (e.g. an apps.Book on the replica's
// go-redis client and key prefix).
func ReplicasWith(t *testing.T, n int, each func(i int, rdb *redis.Client, prefix string) []throttle.Option, opts ...throttle.Option) []*http.Client {
	t.Helper()
	SkipShort(t)
	rdb := redistest.Shared(t)
	prefix := limitertest.Group(t)
	quiet := slog.New(slog.DiscardHandler)
	var clients []*http.Client
	for i := range n {
		base := &http.Transport{MaxIdleConnsPerHost: 256}
		client := rdb.Client(t)
		all := append([]throttle.Option{
			Shared(t, client, prefix),
			throttle.WithBase(base), throttle.WithMaxWait(2 * time.Second),
			throttle.WithLogger(quiet), throttle.WithoutTelemetry(),
		}, opts...)
		if each != nil {
			all = append(all, each(i, client, prefix)...)
		}
		tr := throttle.MustNew(all...)
		t.Cleanup(func() {
			tr.Close()
			base.CloseIdleConnections()
		})
		clients = append(clients, &http.Client{Transport: tr})
	}
	return clients
}

// Until returns a context that is cancelled when the wall clock reaches
// stop: cancelled, not timed out, as a service shutting down would cancel
// its calls, so that calls still waiting then count as Cancelled.
func Until(stop time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(time.Until(stop), cancel)
	return ctx, func() {
		timer.Stop()
		cancel()
	}
}

// Drive fires calls from replicas replicas until ctx ends, rates[api] calls
// per second to each api in total, spread evenly over the replicas, each
// call on its own goroutine with Poisson arrivals, as a busy service fires
// them. call(ctx, replica, api) makes one call. Drive returns the results
// once every call has finished; calls still waiting for a slot when ctx ends
// are cancelled, which gives their slots back.
func Drive[R any](ctx context.Context, replicas int, rates []float64, call func(ctx context.Context, replica, api int) R) []R {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []R
	)
	for i := range replicas {
		for api, rate := range rates {
			perReplica := rate / float64(replicas)
			wg.Add(1)
			go func() {
				defer wg.Done()
				var calls sync.WaitGroup
				defer calls.Wait()
				timer := time.NewTimer(0)
				defer timer.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-timer.C:
					}
					timer.Reset(time.Duration(rand.ExpFloat64() / perReplica * float64(time.Second)))
					calls.Add(1)
					go func() {
						defer calls.Done()
						r := call(ctx, i, api)
						mu.Lock()
						results = append(results, r)
						mu.Unlock()
					}()
				}
			}()
		}
	}
	wg.Wait()
	return results
}

// Result is one call as its caller saw it.
type Result struct {
	// Code is the answer's numeric code, 0 for a success; minus the HTTP
	// status when a non-200 answer carries none.
	Code int
	// Err is the Transport's error, when no answer came back.
	Err error
}

// Send sends req and reads the top-level numeric member codeKey of the
// answer ("errcode" for WeChat and WeCom, "code" for Feishu).
func Send(c *http.Client, req *http.Request, codeKey string) Result {
	resp, err := c.Do(req)
	if err != nil {
		return Result{Err: err}
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var members map[string]any
	if json.Unmarshal(raw, &members) != nil {
		return Result{Code: -resp.StatusCode}
	}
	code, _ := members[codeKey].(float64)
	if code == 0 && resp.StatusCode != http.StatusOK {
		return Result{Code: -resp.StatusCode}
	}
	return Result{Code: int(code)}
}

// Count tallies results; quota says which codes are quota errors.
func Count(results []Result, quota func(code int) bool) Tally {
	var tl Tally
	for _, r := range results {
		tl.Add(r.Err, r.Code == 0, quota(r.Code))
	}
	return tl
}

// Tally counts the callers' outcomes.
type Tally struct {
	Calls, Answered, OK, Quota, OtherAnswers int
	Throttled, Penalized, Cancelled, Failed  int
	FirstFailure                             error
}

// Add counts one call. err is the Transport's error, nil when an answer
// came back; ok and quota say whether that answer was a success or a quota
// error.
func (tl *Tally) Add(err error, ok, quota bool) {
	tl.Calls++
	switch {
	case err == nil:
		tl.Answered++
		switch {
		case ok:
			tl.OK++
		case quota:
			tl.Quota++
		default:
			tl.OtherAnswers++
		}
	case errors.Is(err, throttle.ErrThrottled):
		tl.Throttled++
	case errors.Is(err, throttle.ErrPenalized):
		tl.Penalized++
	case errors.Is(err, context.Canceled):
		tl.Cancelled++
	default:
		tl.Failed++
		if tl.FirstFailure == nil {
			tl.FirstFailure = err
		}
	}
}

// String gives every count but Answered.
func (tl Tally) String() string {
	return fmt.Sprintf("%d calls, %d ok, %d quota errors, %d other error answers, %d throttled locally, %d penalized, %d cancelled at the end, %d failed",
		tl.Calls, tl.OK, tl.Quota, tl.OtherAnswers, tl.Throttled, tl.Penalized, tl.Cancelled, tl.Failed)
}

// ExpectClean fails t unless the callers saw no quota error, no penalty,
// no other error answer and no failure: what a limit never crossed gives.
func (tl Tally) ExpectClean(t testing.TB) {
	t.Helper()
	if tl.Quota != 0 || tl.Penalized != 0 || tl.OtherAnswers != 0 || tl.Failed != 0 {
		t.Errorf("callers saw %d quota errors, %d penalized, %d other error answers, %d failures (first: %v): want none",
			tl.Quota, tl.Penalized, tl.OtherAnswers, tl.Failed, tl.FirstFailure)
	}
}

// MinShare is the share of its published rate an API must get under
// excess demand.
const MinShare = 0.9

// Throughput is what one API got in a run, from the emulator's arrival
// times of its successes.
type Throughput struct {
	N         int     // successes in the run
	Rate      float64 // N over the run, per second
	Sustained float64 // between the first and the last success, per second
}

// Measure is the throughput of the successes arriving at the emulator at
// the times at during run. It sorts at.
func Measure(at []time.Time, run time.Duration) Throughput {
	slices.SortFunc(at, time.Time.Compare)
	th := Throughput{N: len(at), Rate: float64(len(at)) / run.Seconds()}
	if len(at) > 1 {
		th.Sustained = float64(len(at)-1) / at[len(at)-1].Sub(at[0]).Seconds()
	}
	return th
}

// Expect fails t, naming api, if th.Rate is under MinShare of published.
func (th Throughput) Expect(t testing.TB, api string, published float64) {
	t.Helper()
	if th.Rate < MinShare*published {
		t.Errorf("%s: %.2f calls/s succeeded, want at least %.0f%% of %.0f/s", api, th.Rate, 100*MinShare, published)
	}
}

// Busiest is the most of the times ts in one calendar window of length
// window (a wall-clock or emulated second or minute): what a provider
// counting fixed windows counts.
func Busiest(ts []time.Time, window time.Duration) int {
	n := map[time.Time]int{}
	most := 0
	for _, at := range ts {
		w := at.Truncate(window)
		n[w]++
		most = max(most, n[w])
	}
	return most
}

// Run is one load run: when it started and ended and what the callers saw.
type Run struct {
	Start, End time.Time
	Results    []Result
}

// Fire drives calls (see Drive) from replicas for d, rates[api] calls per
// second to each api, and returns the run once every call has finished.
func Fire(replicas int, d time.Duration, rates []float64, call func(ctx context.Context, replica, api int) Result) Run {
	start := time.Now()
	end := start.Add(d)
	ctx, cancel := Until(end)
	defer cancel()
	return Run{Start: start, End: end, Results: Drive(ctx, replicas, rates, call)}
}

// Answers is what an emulator answered: every emulator's Counters converts
// to it.
type Answers struct {
	Total  int
	OK     int
	ByCode map[int]int
}

// ExpectClean logs the callers' tally and the emulator's answers, and fails
// t unless the emulator rejected nothing and the callers saw no quota error,
// penalty, other error answer or failure. quota says which codes are quota
// errors.
func (r Run) ExpectClean(t testing.TB, emu Answers, quota func(code int) bool) Tally {
	t.Helper()
	tl := Count(r.Results, quota)
	t.Logf("callers: %v", tl)
	t.Logf("emulator: %d requests, %d ok, error answers by code %v", emu.Total, emu.OK, emu.ByCode)
	if emu.Total != emu.OK {
		t.Errorf("the emulator gave %d error answers (by code %v), want none", emu.Total-emu.OK, emu.ByCode)
	}
	tl.ExpectClean(t)
	return tl
}

// Arrival is one success as an emulator recorded it: on the wall clock, and
// on the emulator's own (possibly scaled) clock.
type Arrival struct{ At, Emulated time.Time }

// ExpectShare measures the successes of one API that arrived during the
// run, logs them with the busiest window of length window on the emulator's
// clock (against the emulator's windowLimit), and fails t if they fall under
// MinShare of published calls per second.
func (r Run) ExpectShare(t testing.TB, api string, arrivals []Arrival, published float64, window time.Duration, windowLimit int) Throughput {
	t.Helper()
	var at, emulated []time.Time
	for _, a := range arrivals {
		if !a.At.Before(r.Start) && a.At.Before(r.End) {
			at = append(at, a.At)
			emulated = append(emulated, a.Emulated)
		}
	}
	run := r.End.Sub(r.Start)
	got := Measure(at, run)
	t.Logf("%-40s %4d successes in %v: %.2f/s = %.1f%% of the published %.2f/s (sustained %.2f/s); busiest %v of the emulator %d of %d",
		api, got.N, run, got.Rate, 100*got.Rate/published, published, got.Sustained, window, Busiest(emulated, window), windowLimit)
	got.Expect(t, api, published)
	return got
}

// Concurrency counts a call's callers in flight per key (an ID, a chat) and
// remembers the most seen at once, so a test can show its load was
// concurrent rather than assume it.
type Concurrency struct {
	mu      sync.Mutex
	now, hi map[string]int
}

// Enter counts one caller of key in; call the function it returns when the
// call is over.
func (c *Concurrency) Enter(key string) (exit func()) {
	c.mu.Lock()
	if c.now == nil {
		c.now, c.hi = map[string]int{}, map[string]int{}
	}
	c.now[key]++
	c.hi[key] = max(c.hi[key], c.now[key])
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.now[key]--
		c.mu.Unlock()
	}
}

// Most returns the most callers of each key seen in flight at once.
func (c *Concurrency) Most() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.hi))
	for k, v := range c.hi {
		out[k] = v
	}
	return out
}

// ExpectAtLeast fails t unless every key had at least n callers in flight
// at once.
func (c *Concurrency) ExpectAtLeast(t testing.TB, n int) {
	t.Helper()
	most := c.Most()
	t.Logf("most callers in flight at once, by ID: %v", most)
	for k, v := range most {
		if v < n {
			t.Errorf("%q had at most %d callers in flight, want at least %d", k, v, n)
		}
	}
}

// IDs are identifiers of different shapes, as the acceptance tests put
// them in paths and queries: pinyin and mixed-case user IDs, a letters-only
// union ID, letters and digits, a UUID, base64-like, an email, non-ASCII.
var IDs = []string{
	"zhangsan", "liSiSi", "iSbBkOmHmRLXxDsiPiSdUyQiEiE", "manager4220",
	"550e8400-e29b-41d4-a716-446655440000", "dGhpcyBpcyBiYXNlNjQ", "user@example.com", "张三",
}

// SkipShort skips an acceptance test (replicas under load for seconds) in
// -short mode: make test-short is the edit-test loop, make test runs them.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("an acceptance test under load: make test runs it, make test-short does not")
	}
}

// AloneEnv names the variable that runs the tests that measure shares of
// a rate against a latency spread: make test runs them in a stage of their
// own, one package at a time, because the load of other packages' tests
// on a 2-core machine widens the very spread they measure.
const AloneEnv = "THROTTLE_ALONE"

// Alone skips t, saying how to run it, unless AloneEnv is set.
func Alone(t *testing.T) {
	t.Helper()
	if os.Getenv(AloneEnv) == "" {
		t.Skipf("measures shares against a latency spread: runs alone in make test's stage for it (%s=1 go test -p 1 -run %s)", AloneEnv, t.Name())
	}
}
