package throttle_test

// Hostile or garbled inputs against the Transport (the hardening issue):
// each test here failed before its fix.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// year9999 is the end a hostile or garbled message can state.
var year9999 = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// Every penalty, whatever its source, ends within the profile's MaxPenalty,
// in this process and in Redis, and the clamp is logged once per code.
func TestPenaltyBoundedByMaxPenalty(t *testing.T) {
	tests := []struct {
		name string
		// penalise makes the scope "api:/hot" penalised until the year
		// 9999 by the given source.
		penalise func(t *testing.T, c *http.Client, url string, other *limiter.Shared, group string)
		source   string
	}{
		{"answer", func(t *testing.T, c *http.Client, url string, _ *limiter.Shared, _ string) {
			resp, err := get(context.Background(), c, url+"/hot?forever=1")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}, "answer"},
		{"another replica", func(t *testing.T, _ *http.Client, _ string, other *limiter.Shared, group string) {
			// 9999: the limiter caps the wait its reply carries, so the
			// nanosecond Duration cannot overflow into the past.
			until := year9999
			if err := other.Penalize(context.Background(), group, limiter.Penalty{Scope: "api:/hot", Until: until, Code: "forever"}); err != nil {
				t.Fatal(err)
			}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := redistest.Shared(t)
			rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("forever") != "" {
					w.Header().Set("X-Test-Forever", "1")
				}
				io.WriteString(w, `{"errcode":0}`)
			}}
			srv := serve(t, rec)
			group := limitertest.Group(t)
			profile := testProfile(group, mustRule(t, 100, time.Second))
			classify := profile.Classify
			profile.Classify = func(req *http.Request, resp *http.Response, route *providers.Route) providers.Verdict {
				if resp.Header.Get("X-Test-Forever") != "" {
					return providers.Verdict{Kind: providers.Quota, Until: year9999, Code: "forever", NotProcessed: true}
				}
				return classify(req, resp, route)
			}
			profile.MaxPenalty = time.Hour
			logs := &syncBuffer{}
			tr := throttle.MustNew(throttle.WithRedis(rdb.Client(t)), throttle.WithProfiles(profile), throttle.WithoutRetry(),
				throttle.WithoutTelemetry(), throttle.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
			t.Cleanup(func() { tr.Close() })
			c := &http.Client{Transport: tr}
			other, err := newSharedOnly(t, rdb.Client(t), "")
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			tt.penalise(t, c, srv.URL, other, group)
			// Whichever way it arrives (answer, announcement, Redis), the
			// penalty reaches this Transport bounded.
			var pe *throttle.PenaltyError
			waitFor(t, 5*time.Second, func() bool {
				_, err := get(context.Background(), c, srv.URL+"/hot")
				return errors.As(err, &pe)
			})
			if limit := time.Now().Add(time.Hour); pe.Until.After(limit) || pe.Until.Before(began.Add(59*time.Minute)) {
				t.Errorf("penalty until %v, want about an hour from now (MaxPenalty)", pe.Until)
			}
			if tt.source == "answer" {
				// The penalty this Transport wrote to Redis is bounded too:
				// a fresh replica sees an hour, not the year 9999.
				res, err := other.Reserve(context.Background(), limiter.Request{Group: group, Scopes: []string{"api:/hot"}})
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, 5*time.Second, func() bool {
					res, err = other.Reserve(context.Background(), limiter.Request{Group: group, Scopes: []string{"api:/hot"}})
					return err == nil && res.Penalty() != nil
				})
				if res.Penalty().Until.After(time.Now().Add(time.Hour)) {
					t.Errorf("penalty in Redis until %v, want at most an hour", res.Penalty().Until)
				}
				// A second such answer (on another path) is clamped without
				// a second log line.
				resp, err := get(context.Background(), c, srv.URL+"/warm?forever=1")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			if n := strings.Count(logs.String(), "MaxPenalty"); n != 1 {
				t.Errorf("%d clamp log lines, want 1:\n%s", n, logs)
			}
			if !strings.Contains(logs.String(), "provider="+group) || !strings.Contains(logs.String(), "code=forever") {
				t.Errorf("clamp log does not name provider and code:\n%s", logs)
			}
		})
	}
}

// A DingTalk 90001 whose errmsg states an end in the year 9999 penalises
// the egress for the code's own window (the profile's default penalty),
// not for ever.
func TestDingtalkYear9999EndNotTrusted(t *testing.T) {
	srv := serve(t, &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"errcode":90001,"errmsg":"您的服务器调用钉钉开放平台所有接口的请求都被暂时禁用了, 处罚将在 9999-12-31 23:59:59 结束."}`)
	}})
	p := dingtalk.MustNew(dingtalk.Config{Hosts: []string{strings.TrimPrefix(srv.URL, "http://")}, Apps: []dingtalk.App{{AppKey: "ding9999"}}}).Profile()
	c := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(p), throttle.WithoutRetry(), throttle.WithoutTelemetry(),
		throttle.WithLogger(quiet))}
	resp, err := c.Post(srv.URL+"/topapi/v2/user/get?access_token=t", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, err = c.Post(srv.URL+"/topapi/v2/user/get?access_token=t", "application/json", strings.NewReader(`{}`))
	var pe *throttle.PenaltyError
	if !errors.As(err, &pe) || pe.Scope != "egress:default" {
		t.Fatalf("err = %v, want the egress penalised", err)
	}
	if left := time.Until(pe.Until); left > providers.DefaultPenalty {
		t.Errorf("egress penalised for %v, want at most the default %v", left, providers.DefaultPenalty)
	}
}

// cancelling cancels its context as a Reserve call starts: the caller
// gives up while the limiter works.
type cancelling struct {
	limiter.Limiter
	cancel context.CancelFunc
}

func (c *cancelling) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	c.cancel()
	return c.Limiter.Reserve(ctx, req)
}

// lateTimer is a context whose deadline has passed and whose timer has not
// fired yet: Err and Done do not say so.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }

// A caller that gave up, or whose deadline passed, gets its context's error
// and nothing else, whatever the limiter; the metrics count it cancelled,
// not as a limiter failure.
func TestCancellationIsTheContextsError(t *testing.T) {
	rdb := redistest.Shared(t)
	srv := serve(t, &recorder{})
	cancelled := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel
	}
	pastDeadline := func() (context.Context, context.CancelFunc) {
		return context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	}
	memory := func(*testing.T, context.CancelFunc) throttle.Option { return throttle.WithLimiter(limiter.NewMemory()) }
	shared := func(t *testing.T, _ context.CancelFunc) throttle.Option { return throttle.WithRedis(rdb.Client(t)) }
	tests := []struct {
		name    string
		limiter func(t *testing.T, cancel context.CancelFunc) throttle.Option
		ctx     func() (context.Context, context.CancelFunc)
		want    error
	}{
		{"memory, cancelled", memory, cancelled, context.Canceled},
		{"memory, deadline passed", memory, pastDeadline, context.DeadlineExceeded},
		{"redis, cancelled", shared, cancelled, context.Canceled},
		{"redis, deadline passed", shared, pastDeadline, context.DeadlineExceeded},
		{"redis, cancelled during the limiter call", func(t *testing.T, cancel context.CancelFunc) throttle.Option {
			r, err := newSharedOnly(t, rdb.Client(t), "")
			if err != nil {
				t.Fatal(err)
			}
			return throttle.WithLimiter(&cancelling{Limiter: r, cancel: cancel})
		}, func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, context.Canceled},
		// A context's timer fires a little after its deadline: the Redis
		// call, bounded by the deadline, fails on it first.
		{"redis, deadline passed before the context says so", func(t *testing.T, _ context.CancelFunc) throttle.Option {
			c := redis.NewClient(&redis.Options{Addr: rdb.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { c.Close() })
			return throttle.WithRedis(c)
		}, func() (context.Context, context.CancelFunc) {
			return lateTimer{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}, func() {}
		}, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			o := newObservability(t)
			opts := append([]throttle.Option{tt.limiter(t, cancel),
				throttle.WithProfiles(testProfile(limitertest.Group(t), mustRule(t, 100, time.Second)))}, o.opts...)
			tr := throttle.MustNew(opts...)
			t.Cleanup(func() { tr.Close() })
			_, err := get(ctx, &http.Client{Transport: tr}, srv.URL+"/a")
			if !errors.Is(err, tt.want) || errors.Is(err, throttle.ErrLimiterUnavailable) || errors.Is(err, throttle.ErrThrottled) {
				t.Fatalf("err = %v, want %v only", err, tt.want)
			}
			got := counts(t, o.metrics(t)["throttle.requests"], "outcome")
			if got["cancelled"] != 1 || len(got) != 1 {
				t.Errorf("outcomes %v, want one cancelled", got)
			}
		})
	}
}

// When retries run out on a refusal, the error wraps the refusal and the
// failure of the attempt before it: errors.Is finds both.
func TestRetryRefusalKeepsTheEarlierFailure(t *testing.T) {
	// A server that reads the request and closes the connection without
	// an answer: the first attempt was written, so its slot stays booked,
	// and the GET is retried; the retry's slot is 10 s ahead, past the
	// 1 s budget. (An attempt refused before the write gives its slot back
	// and would not be refused.)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Read(make([]byte, 4096))
			conn.Close()
		}
	}()
	c := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(testProfile("p", mustRule(t, 1, 10*time.Second))),
		throttle.WithMaxWait(time.Second), throttle.WithoutTelemetry(),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}))}
	_, err = get(context.Background(), c, "http://"+ln.Addr().String()+"/a")
	if !errors.Is(err, throttle.ErrThrottled) || !errors.Is(err, io.EOF) {
		t.Fatalf("err = %v, want ErrThrottled wrapping the closed connection", err)
	}
	if !strings.Contains(err.Error(), "EOF") {
		t.Errorf("err = %q, want the earlier failure in the text", err)
	}
	t.Logf("err = %v", err)
}

// A refusal while limiting locally (Redis away) names what held it: today's
// text read "rate limited by : next slot in 543ms".
func TestLocalFallbackRefusalNamesItsRule(t *testing.T) {
	rs := redistest.Start(t)
	srv := serve(t, &recorder{})
	tr := throttle.MustNew(throttle.WithoutTelemetry(), throttle.WithoutRetry(), throttle.WithLogger(quiet),
		throttle.WithProfiles(testProfile(limitertest.Group(t), mustRule(t, 1, 2*time.Second))), throttle.WithMaxWait(500*time.Millisecond),
		sharedOpt(t, rs.Client(t), limiter.SharedConfig{Share: 1, Timeout: 200 * time.Millisecond, Probe: time.Minute}))
	t.Cleanup(func() { tr.Close() })
	c := &http.Client{Transport: tr}
	if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	rs.Stop()
	// Limiting on its own, the replica starts its slots after the one Redis
	// booked, 2 s ahead: past the budget.
	_, err := get(context.Background(), c, srv.URL+"/a")
	var te *throttle.ThrottledError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want ErrThrottled", err)
	}
	if te.Rule == "" || strings.Contains(err.Error(), "by :") {
		t.Errorf("err = %q: the refusal names no rule", err)
	}
	t.Logf("err = %v", err)
}

// A proxy's or firewall's HTML 403 in front of DingTalk is a transient
// failure, retried and counted as such, never the IP ban that would stop
// every API of every replica.
func TestDingtalkProxyPageIsNotTheBan(t *testing.T) {
	rec := scripted(func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `<html><head><title>访问被拒绝</title></head><body>Blocked by the corporate proxy</body></html>`)
	})
	srv := serve(t, rec)
	o := newObservability(t)
	p := dingtalk.MustNew(dingtalk.Config{Hosts: []string{strings.TrimPrefix(srv.URL, "http://")}, Apps: []dingtalk.App{{AppKey: "dingproxy"}}}).Profile()
	c := &http.Client{Transport: throttle.MustNew(append([]throttle.Option{throttle.WithProfiles(p), throttle.WithLimiter(limiter.NewMemory()),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})}, o.opts...)...)}
	for i := range 2 {
		resp, err := c.Post(srv.URL+"/topapi/v2/user/get?access_token=t", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: status %d, want the retry's 200", i, resp.StatusCode)
		}
	}
	if n := len(rec.seen()); n != 3 {
		t.Errorf("server saw %d requests, want 3 (the proxy page, its retry, the next call)", n)
	}
	m := o.metrics(t)
	if _, ok := m["throttle.penalties"]; ok {
		t.Errorf("a penalty was recorded: %+v", m["throttle.penalties"])
	}
	if got := counts(t, m["throttle.retries"], "provider"); got["dingtalk"] != 1 {
		t.Errorf("retries %v, want 1", got)
	}
}

// stalling holds every Cancel, Release and Penalize until release is
// closed (or its context ends), as a Redis that stopped answering would,
// and then passes it on to the real limiter.
type stalling struct {
	limiter.Limiter
	release  chan struct{}
	entered  chan string
	finished atomic.Int64
}

func (s *stalling) stall(ctx context.Context, op string) {
	s.entered <- op
	select {
	case <-s.release:
	case <-ctx.Done():
	}
}

// Reserve hands out slots whose Cancel and Release stall.
func (s *stalling) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	res, err := s.Limiter.Reserve(ctx, req)
	if err != nil || !res.OK() {
		return res, err
	}
	return limiter.Admit(time.Now(), res.Delay(), res.Rule(), func(ctx context.Context) error {
		s.stall(ctx, "cancel")
		defer s.finished.Add(1)
		return res.Cancel(ctx)
	}, func(ctx context.Context) error {
		s.stall(ctx, "release")
		defer s.finished.Add(1)
		return res.Release(ctx)
	}), nil
}

func (s *stalling) Penalize(ctx context.Context, group string, p limiter.Penalty) error {
	s.stall(ctx, "penalize")
	defer s.finished.Add(1)
	return s.Limiter.Penalize(ctx, group, p)
}

// Giving a slot back, ending a lease and writing a penalty happen off the
// request path: the request returns while the limiter still stalls on
// them, and Close waits for them; no goroutine outlives Close.
func TestLimiterUpkeepLeavesTheRequestPath(t *testing.T) {
	rdb := redistest.Shared(t)
	tests := []struct {
		name string
		op   string
		// call makes one request that needs op, given a client and the
		// server's URL.
		call func(t *testing.T, c *http.Client, url string)
		// rules of the profile
		rules func(t *testing.T) []rule.Rule
	}{
		{"a cancelled wait gives its slot back", "cancel", func(t *testing.T, c *http.Client, url string) {
			if _, err := get(context.Background(), c, url+"/a"); err != nil {
				t.Fatal(err)
			}
			// The next slot is 2 s ahead, within the 5 s budget: the call
			// waits, and the caller gives up during the wait.
			ctx, cancel := context.WithCancel(context.Background())
			defer time.AfterFunc(50*time.Millisecond, cancel).Stop()
			if _, err := get(ctx, c, url+"/a"); !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
		}, func(t *testing.T) []rule.Rule { return []rule.Rule{mustRule(t, 1, 2*time.Second)} }},
		{"an answer ends the lease", "release", func(t *testing.T, c *http.Client, url string) {
			if _, err := get(context.Background(), c, url+"/a"); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T) []rule.Rule {
			return []rule.Rule{mustRule(t, 100, time.Second),
				rule.Must(rule.NewConcurrency("inflight", 4, time.Minute))}
		}},
		{"a quota answer writes the penalty", "penalize", func(t *testing.T, c *http.Client, url string) {
			if _, err := get(context.Background(), c, url+"/a?quota=1"); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T) []rule.Rule { return []rule.Rule{mustRule(t, 100, time.Second)} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			srv := serve(t, &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("quota") != "" {
					w.Header().Set("X-Test-Quota", "1")
				}
				io.WriteString(w, `{"errcode":0}`)
			}})
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			r, err := newSharedOnly(t, rdb.Client(t), "")
			if err != nil {
				t.Fatal(err)
			}
			lim := &stalling{Limiter: r, release: make(chan struct{}), entered: make(chan string, 4)}
			tr := throttle.MustNew(throttle.WithLimiter(lim), throttle.WithBase(base), throttle.WithoutRetry(),
				throttle.WithoutTelemetry(), throttle.WithLogger(quiet), throttle.WithMaxWait(5*time.Second),
				throttle.WithProfiles(testProfile(limitertest.Group(t), tt.rules(t)...)))
			tt.call(t, &http.Client{Transport: tr}, srv.URL)
			// The request is back; its upkeep has started and is stalled.
			if op := <-lim.entered; op != tt.op {
				t.Fatalf("limiter asked to %s, want %s", op, tt.op)
			}
			if n := lim.finished.Load(); n != 0 {
				t.Fatalf("%d upkeep calls finished before the request returned: they ran on its path", n)
			}
			close(lim.release)
			tr.Close()
			if n := lim.finished.Load(); n == 0 {
				t.Fatal("Close returned before the stalled upkeep finished")
			}
		})
	}
}

// A route the limiter cannot evaluate (a scope over 256 bytes) is the
// profile's mistake, reported as limiter.ErrInvalidRequest, not as an
// unavailable limiter that would page someone about Redis.
func TestInvalidRouteIsNotAnOutage(t *testing.T) {
	rdb := redistest.Shared(t)
	srv := serve(t, &recorder{})
	p := testProfile(limitertest.Group(t), mustRule(t, 100, time.Second))
	p.Route = func(r *http.Request) (providers.Route, error) {
		return providers.Route{API: "/a", Rules: []rule.Rule{mustRule(t, 100, time.Second)},
			Scopes: []string{"api:" + strings.Repeat("x", 300)}}, nil
	}
	o := newObservability(t)
	tr := throttle.MustNew(append(o.opts, throttle.WithRedis(rdb.Client(t)), throttle.WithProfiles(p), throttle.WithLogger(quiet))...)
	t.Cleanup(func() { tr.Close() })
	_, err := get(context.Background(), &http.Client{Transport: tr}, srv.URL+"/a")
	if !errors.Is(err, limiter.ErrInvalidRequest) || errors.Is(err, throttle.ErrLimiterUnavailable) {
		t.Fatalf("err = %v, want limiter.ErrInvalidRequest and not ErrLimiterUnavailable", err)
	}
	if n := len(srv.Config.Handler.(*recorder).seen()); n != 0 {
		t.Fatalf("server saw %d requests, want none", n)
	}
	// A config's fault, counted as route_error and not retried (the same
	// route gets the same answer): it was limiter_error, retried twice.
	m := o.metrics(t)
	if got := counts(t, m["throttle.requests"], "outcome"); len(got) != 1 || got["route_error"] != 1 {
		t.Errorf("throttle.requests by outcome = %v, want route_error: 1", got)
	}
	if r, ok := m["throttle.retries"]; ok && len(counts(t, r, "provider")) > 0 {
		t.Errorf("throttle.retries = %v, want none", counts(t, r, "provider"))
	}
}

// A slot that lies past the caller's deadline once the limiter's call is
// done (a slow round trip took part of the budget, or Redis failed before
// the local fallback) is refused at once with ErrThrottled and given back,
// never waited for until the deadline.
func TestSlotPastTheDeadlineAfterTheCallIsRefusedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(p *faultproxy.Proxy)
	}{
		// The reply reaches the replica 150 ms after Redis decided: the
		// slot Redis fitted in the budget lies past the deadline here.
		{"redis 150 ms away each way", func(p *faultproxy.Proxy) { p.SetLatency(150 * time.Millisecond) }},
		// The local fallback books after a 500 ms call that failed.
		{"redis stalls, local fallback", func(p *faultproxy.Proxy) { p.Stall() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := faultproxy.Start(t, redistest.Shared(t).Addr)
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			srv := serve(t, &recorder{})
			o := newObservability(t)
			tr := throttle.MustNew(append([]throttle.Option{throttle.WithoutRetry(),
				throttle.WithProfiles(testProfile(limitertest.Group(t), mustRule(t, 1, time.Second))),
				sharedOpt(t, rdb, limiter.SharedConfig{Share: 1, Timeout: 500 * time.Millisecond})}, o.opts...)...)
			t.Cleanup(func() { tr.Close() })
			c := &http.Client{Transport: tr}
			if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
				t.Fatal(err)
			}
			tc.fault(proxy)
			// The next slot is about a second after the first: within the
			// 900 ms budget as Redis (or the fallback) sees it, past the
			// deadline as the replica gets the answer.
			ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
			defer cancel()
			_, err := get(ctx, c, srv.URL+"/a")
			if ctx.Err() != nil {
				t.Errorf("the request returned after its deadline (%v)", err)
			}
			if !errors.Is(err, throttle.ErrThrottled) {
				t.Fatalf("err = %v, want ErrThrottled", err)
			}
			if got := counts(t, o.metrics(t)["throttle.requests"], "outcome"); got["throttled"] != 1 {
				t.Errorf("outcomes %v, want one throttled", got)
			}
		})
	}
}
