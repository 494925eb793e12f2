package limiter_test

import (
	"context"
	"slices"
	"strings"
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

// The whole contract holds on a three-master Redis Cluster: every key of a
// request shares its group's hash tag, so each script runs on one shard.
func TestRedisClusterConformance(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 0)
	limitertest.Run(t, func(t *testing.T, n int) []limiter.Limiter {
		out := make([]limiter.Limiter, n)
		for i := range out {
			l, err := limiter.NewRedis(c.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			out[i] = l
		}
		return out
	})
}

// noscripts records when a client met NOSCRIPT, the answer of a node that
// has not loaded a script yet (a fresh node, a promoted replica).
type noscripts struct {
	mu sync.Mutex
	at []time.Time
}

func (h *noscripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *noscripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *noscripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && cmd.Name() == "evalsha" && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			h.mu.Lock()
			h.at = append(h.at, time.Now())
			h.mu.Unlock()
		}
		return err
	}
}

func (h *noscripts) since(t time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, at := range h.at {
		if !at.Before(t) {
			n++
		}
	}
	return n
}

// A replica takes over the shard holding a group's keys in the middle of the
// load. Calls may fail while it does, but none hangs past its deadline, no
// rule is exceeded across the take-over, the promoted replica gets the
// scripts through the EVAL fallback, and traffic resumes.
func TestRedisClusterFailover(t *testing.T) {
	cases := []struct {
		name     string
		takeOver func(*redistest.Cluster, testing.TB, string) (string, string)
	}{
		// The coordinated failover loses no write, so the rules' state
		// carries over exactly.
		{"manual failover", (*redistest.Cluster).Failover},
		// A crash may lose the last writes the replica had not received,
		// rolling a rule's state back; the rules still hold because no
		// admission happens while the shard is down (about twice the node
		// timeout), longer than any period below.
		{"master killed", (*redistest.Cluster).KillMaster},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testFailover(t, tc.takeOver)
		})
	}
}

func testFailover(t *testing.T, takeOver func(*redistest.Cluster, testing.TB, string) (string, string)) {
	c := redistest.StartCluster(t, 3, 1)
	rules := []rule.Rule{
		rule.Must(rule.New("api", 20, time.Second)),
		rule.Must(rule.New("app", 30, 2*time.Second, rule.WithBurst(5))),
	}
	if rules[1].Period() > redistest.NodeTimeout {
		t.Fatalf("rule periods must not exceed the node timeout %v", redistest.NodeTimeout)
	}
	group := limitertest.Group(t)
	req := limiter.Request{Group: group, Rules: rules, MaxWait: 300 * time.Millisecond}

	// Three replicas of a service, each with its own cluster client.
	const replicas, workers = 3, 4
	hooks := &noscripts{}
	ls := make([]*limiter.Redis, replicas)
	for i := range ls {
		cc := c.Client(t)
		cc.AddHook(hooks)
		l, err := limiter.NewRedis(cc)
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}

	const callTimeout = time.Second
	var (
		mu       sync.Mutex
		sends    []time.Time // scheduled send times, on Redis's clock
		admitted atomic.Int64
		failures atomic.Int64
		slowest  atomic.Int64          // the longest Reserve, in nanoseconds
		warm     = make(chan struct{}) // closed once the load is under way
		warmOnce sync.Once
		healed   atomic.Pointer[time.Time] // when the take-over completed
		resumed  = make(chan struct{})     // closed once the load is back
		resOnce  sync.Once
		afterN   atomic.Int64 // admitted with a send time after healed
		stop     = make(chan struct{})
		stopOnce sync.Once
		wg       sync.WaitGroup
	)
	const enough = 40 // admissions that make the load "under way" or "back"
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer halt()
	for _, l := range ls {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				timer := time.NewTimer(0)
				<-timer.C
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					start := time.Now()
					res, err := l.Reserve(ctx, req)
					took := time.Since(start)
					cancel()
					for {
						old := slowest.Load()
						if int64(took) <= old || slowest.CompareAndSwap(old, int64(took)) {
							break
						}
					}
					wait := res.RetryAfter()
					switch {
					case err != nil:
						failures.Add(1)
						wait = 20 * time.Millisecond // back off, as a fallback would
					case res.OK():
						mu.Lock()
						sends = append(sends, res.SendAt())
						mu.Unlock()
						if admitted.Add(1) >= enough {
							warmOnce.Do(func() { close(warm) })
						}
						if h := healed.Load(); h != nil && res.SendAt().After(*h) && afterN.Add(1) >= enough {
							resOnce.Do(func() { close(resumed) })
						}
						wait = res.Delay()
					}
					timer.Reset(wait)
					select {
					case <-timer.C:
					case <-stop:
						timer.Stop()
						return
					}
				}
			}()
		}
	}
	deadline := time.After(60 * time.Second)
	select {
	case <-warm:
	case <-deadline:
		t.Fatalf("only %d admitted before the take-over (%d failures)", admitted.Load(), failures.Load())
	}
	key := ls[0].RuleKey(group, "api")
	failedAt := time.Now()
	before := failures.Load()
	from, to := takeOver(c, t, key)
	healedAt := time.Now()
	healed.Store(&healedAt)
	select {
	case <-resumed:
	case <-deadline:
		t.Fatalf("traffic did not resume after the take-over: %d admitted, %d failures", admitted.Load(), failures.Load())
	}
	halt()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%s -> %s in %v: %d admitted, %d failed calls during the take-over, %d NOSCRIPT after it, slowest call %v",
		from, to, healedAt.Sub(failedAt).Round(time.Millisecond), len(sends), failures.Load()-before,
		hooks.since(failedAt), time.Duration(slowest.Load()).Round(time.Millisecond))

	slices.SortFunc(sends, time.Time.Compare)
	for _, r := range rules {
		if most, at := limitertest.MaxInWindow(sends, r.Period()); most > r.Limit() {
			t.Errorf("rule %v: %d sends in the window starting at %v", r, most, at.Format(time.StampMicro))
		}
	}
	if n := hooks.since(failedAt); n == 0 {
		t.Error("no NOSCRIPT after the take-over: the promoted replica should not have had the scripts")
	}
	if d := time.Duration(slowest.Load()); d > callTimeout+500*time.Millisecond {
		t.Errorf("a Reserve took %v, past its %v deadline", d, callTimeout)
	}
}
