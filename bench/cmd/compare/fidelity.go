package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	throttle "github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// fidelityAPI is an API outside the monthly quota: only the per-API,
// per-second limit (and the per-IP one) apply.
const fidelityAPI = "/topapi/processinstance/get"

// fidelity is one design's run against the emulator.
type fidelity struct {
	d             design
	skew          bool
	demand        int     // calls the replicas wanted to make
	sent          int     // calls that reached the emulator
	rejected      int     // refused by the emulator's per-API limit
	ok            int     // answered with success within the run's whole seconds
	seconds       int     // the emulator's whole seconds inside the run
	share         float64 // ok / (published limit * seconds)
	overSeconds   int     // wall-clock seconds with at least one refusal
	banned        bool    // the emulator's 5-minute IP ban was triggered
	callsPerSent  float64 // Redis commands per call sent
	rejectedShare float64 // rejected / sent
}

type fidelityConfig struct {
	replicas int
	limit    int // the published per-API limit
	demandX  int // demand as a multiple of the limit
	dur      time.Duration
	budget   time.Duration // how long one call may wait for a slot
	latMax   time.Duration // emulated latency is uniform in [0, latMax]
	skew     time.Duration // replicas' clocks spread over ±skew
	parallel bool          // run the rows at once
}

// sender makes one call: wait for a slot within ctx, then send.
type sender func(ctx context.Context, deadline time.Time) (sent bool, err error)

// runFidelity drives `replicas` replicas of design d, each with its own
// Redis client and HTTP transport, at demandX times the published limit,
// against a DingTalk emulator with jittered latency.
func runFidelity(ctx context.Context, addr string, d design, fc fidelityConfig, skewed bool, run int) (fidelity, error) {
	emu := dingtalktest.New(dingtalktest.Options{
		QPS:        fc.limit,
		DefaultApp: "bench",
		LatencyMin: 0, LatencyMax: fc.latMax,
	})
	defer emu.Close()

	calls := &callCounter{}
	var senders []sender
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	url := emu.URL + fidelityAPI + "?access_token=bench&process_instance_id=1"
	tag := fmt.Sprintf("f%d%s", run, d.id)
	for r := range fc.replicas {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		rdb.AddHook(calls)
		base := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}
		closers = append(closers, func() { base.CloseIdleConnections(); rdb.Close() })
		var skew time.Duration
		if skewed && fc.replicas > 1 {
			// Spread evenly over [-skew, +skew].
			skew = -fc.skew + time.Duration(r)*2*fc.skew/time.Duration(fc.replicas-1)
		}
		if d.id == "ours1" {
			shared, err := limiter.NewShared(rdb, limiter.SharedConfig{Prefix: tag})
			if err != nil {
				return fidelity{}, err
			}
			t := throttle.MustNew(
				throttle.WithLimiter(shared),
				throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "bench", PerAPIRate: fc.limit}}}).Profile()),
				throttle.WithMaxWait(fc.budget),
				throttle.WithBase(base),
				throttle.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
			)
			closers = append(closers, func() { _ = t.Close() })
			hc := &http.Client{Transport: t}
			senders = append(senders, func(ctx context.Context, _ time.Time) (bool, error) {
				return send(ctx, hc, url)
			})
			continue
		}
		g, err := d.build(params{rdb: rdb, key: tag, limit: fc.limit, period: time.Second, replicas: fc.replicas, skew: skew})
		if err != nil {
			return fidelity{}, fmt.Errorf("%s: %w", d.name, err)
		}
		hc := &http.Client{Transport: base}
		senders = append(senders, func(ctx context.Context, deadline time.Time) (bool, error) {
			gr, err := g.acquire(ctx, deadline)
			if err != nil || !gr.ok {
				return false, nil
			}
			return send(ctx, hc, url)
		})
	}

	perReplica := float64(fc.limit*fc.demandX) / float64(fc.replicas)
	interval := time.Duration(float64(time.Second) / perReplica)
	start := time.Now()
	end := start.Add(fc.dur)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		demand int
		errs   []error
	)
	for r, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Replicas tick out of phase with each other.
			phase := time.Duration(r) * interval / time.Duration(fc.replicas)
			for i := 0; ; i++ {
				at := start.Add(phase + time.Duration(i)*interval)
				if !at.Before(end) {
					return
				}
				if sleep(ctx, time.Until(at)) != nil {
					return
				}
				mu.Lock()
				demand++
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					// The wait is bounded by the budget; the send gets a
					// second more, so that a slot booked at the end of the
					// budget is not wasted by the harness.
					deadline := time.Now().Add(fc.budget)
					cctx, ccancel := context.WithDeadline(ctx, deadline.Add(time.Second))
					defer ccancel()
					if _, err := s(cctx, deadline); err != nil && cctx.Err() == nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return fidelity{}, fmt.Errorf("%s: %d calls failed, first: %w", d.name, len(errs), errs[0])
	}
	st := emu.Stats()
	f := fidelity{d: d, skew: skewed, demand: demand, sent: st.Requests, rejected: st.Rejected, banned: st.Bans > 0}
	firstSec, lastSec := start.Add(time.Second-1).Unix(), end.Unix()
	f.seconds = int(lastSec - firstSec)
	over := map[int64]bool{}
	for _, rec := range emu.Requests() {
		switch {
		case rec.Code == "" && rec.Status == http.StatusOK:
			// The share counts the emulator's whole seconds inside the
			// run; calls that waited past its end still count as sent
			// and, if refused, as rejected.
			if sec := rec.At.Unix(); sec >= firstSec && sec < lastSec {
				f.ok++
			}
		case rec.Code != "ip-ban":
			over[rec.At.Unix()] = true
		}
	}
	f.overSeconds = len(over)
	f.share = float64(f.ok) / (float64(fc.limit) * float64(max(1, f.seconds)))
	if f.sent > 0 {
		f.callsPerSent = float64(calls.n.Load()) / float64(f.sent)
		f.rejectedShare = float64(f.rejected) / float64(f.sent)
	}
	return f, nil
}

// send makes one GET and reads the answer. Throttled calls (the Transport
// refusing to wait past the budget) and calls cut by the end of the run are
// not errors: they were simply not sent.
func send(ctx context.Context, hc *http.Client, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil || isThrottled(err) {
			return false, nil
		}
		return false, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return true, nil
}

func isThrottled(err error) bool {
	return errors.Is(err, throttle.ErrThrottled) || errors.Is(err, throttle.ErrPenalized)
}
