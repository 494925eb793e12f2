package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

type options struct {
	duration    time.Duration
	replicas    int
	demand      float64
	redisURL    string
	naive       bool
	real        bool
	dumpMetrics bool
	egressLimit int
	jitter      time.Duration
	headroom    time.Duration
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "how long to fire calls")
	flag.IntVar(&o.replicas, "replicas", 4, "simulated replicas of the service")
	flag.Float64Var(&o.demand, "demand", 5, "calls fired per API, as a multiple of the published per-API limit")
	flag.StringVar(&o.redisURL, "redis", "", "share the limits through this Redis (redis://host:port/db); default: one in-memory limiter shared by the replicas")
	flag.BoolVar(&o.naive, "naive", false, "fire the same load without throttle")
	flag.BoolVar(&o.real, "real", false, "call the real DingTalk API with DINGTALK_APP_KEY and DINGTALK_APP_SECRET (never in CI)")
	flag.BoolVar(&o.dumpMetrics, "metrics", false, "print every metric the Transports recorded")
	flag.IntVar(&o.egressLimit, "egress-limit", 1000, "the emulator's per-IP limit per 20 s (DingTalk's is 10,000; scaled down so a short run can reach it)")
	flag.DurationVar(&o.jitter, "latency-jitter", 20*time.Millisecond, "the emulator's latency varies between 0 and this")
	flag.DurationVar(&o.headroom, "headroom", 50*time.Millisecond, "the preset's Jitter: rules keep their limit in any window of Period+headroom (negative: none)")
	flag.Parse()
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// target is where the calls go: the emulator, or DingTalk itself.
type target struct {
	base    string // scheme://host
	token   string
	hosts   []string
	appKey  string
	emu     *dingtalktest.Server
	oldPath string
	newPath string
}

func run(o options, out io.Writer) error {
	if o.replicas < 1 || o.duration <= 0 || o.demand <= 0 {
		return errors.New("-replicas, -duration and -demand must be positive")
	}
	tg, err := newTarget(o)
	if err != nil {
		return err
	}
	if tg.emu != nil {
		defer tg.emu.Close()
	}
	preset, err := dingtalk.New(dingtalk.Config{
		Hosts: tg.hosts, EgressLimit: o.egressLimit, EgressPeriod: 20 * time.Second,
		Jitter: max(o.headroom, 0), NoJitter: o.headroom < 0,
		Apps: []dingtalk.App{{AppKey: tg.appKey}},
	})
	if err != nil {
		return err
	}
	profile := preset.Profile()
	var rdb *redis.Client
	redisAt := ""
	if o.redisURL != "" {
		opt, err := redis.ParseURL(o.redisURL)
		if err != nil {
			// The parser's message quotes the URL, password and all.
			return errors.New("-redis: the URL does not parse (want redis://[user:password@]host:port[/db]; " +
				"write '/', '?', '#' and '@' in the password as %2F, %3F, %23 and %40)")
		}
		// The Transport's deadlines then reach Redis's socket.
		opt.ContextTimeoutEnabled = true
		redisAt = opt.Addr // never the URL: it may hold a password
		rdb = redis.NewClient(opt)
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			return fmt.Errorf("-redis: %w", err)
		}
	}
	replicas, closeAll := newReplicas(o, profile, rdb)
	defer closeAll()

	limit := float64(dingtalk.Standard.Rate())
	mode := "throttle, replicas sharing one in-memory limiter"
	switch {
	case o.naive:
		mode = "naive: no throttle"
	case rdb != nil:
		mode = "throttle, replicas sharing Redis at " + redisAt
	}
	where := "the DingTalk emulator (offline)"
	if o.real {
		where = "the real DingTalk API"
	}
	fmt.Fprintf(out, "%d replicas call %s for %v, %s; calls still waiting for a slot or an answer then get up to %v more.\n",
		o.replicas, where, o.duration, mode, callTimeout)
	fmt.Fprintf(out, "Demand: %.0f calls/s to each of 2 APIs (%.0f× the published %v/s per app and API).\n\n",
		o.demand*limit, o.demand, limit)

	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range replicas {
		for _, path := range []string{tg.oldPath, tg.newPath} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.fire(ctx, tg, path, o.demand*limit/float64(o.replicas))
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	showProgress(out, replicas, start, done)
	elapsed := time.Since(start)
	return summarize(out, o, tg, replicas, start, elapsed, limit)
}

// newReplicas builds the replicas' clients: each its own Transport (none
// with -naive) on Redis when rdb is set, else all on one in-memory limiter.
// closeAll closes the Transports.
func newReplicas(o options, profile providers.Profile, rdb *redis.Client) (replicas []*replica, closeAll func()) {
	var shared limiter.Limiter = limiter.NewMemory()
	var closers []func() error
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	replicas = make([]*replica, o.replicas)
	for i := range replicas {
		r := &replica{id: i + 1, reader: sdkmetric.NewManualReader()}
		r.meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
		var rt http.RoundTripper = http.DefaultTransport
		if !o.naive {
			opts := []throttle.Option{
				throttle.WithProfiles(profile), throttle.WithMeterProvider(r.meter), throttle.WithLogger(quiet),
				throttle.WithMaxWait(2 * time.Second),
			}
			if rdb != nil {
				opts = append(opts, throttle.WithRedis(rdb))
			} else {
				opts = append(opts, throttle.WithLimiter(shared))
			}
			tr := throttle.MustNew(opts...)
			closers = append(closers, tr.Close)
			rt = tr
		}
		r.client = &http.Client{Transport: rt, Timeout: 10 * time.Second}
		replicas[i] = r
	}

	return replicas, func() {
		for _, c := range closers {
			c()
		}
	}
}

// showProgress prints the replicas' counts until done is closed. On a
// terminal the progress line is rewritten in place; in a log (CI, a pipe, a
// file) it is one line per second.
func showProgress(out io.Writer, replicas []*replica, start time.Time, done <-chan struct{}) {
	interactive := isTerminal(out)
	every, eol := time.Second, "\n"
	if interactive {
		every, eol = 500*time.Millisecond, ""
	}
	progress := time.NewTicker(every)
loop:
	for {
		select {
		case <-done:
			break loop
		case <-progress.C:
			var s tally
			for _, r := range replicas {
				s.add(r.live())
			}
			if interactive {
				fmt.Fprint(out, "\r")
			}
			fmt.Fprintf(out, "%5.1fs  sent %6d  ok %6d  refused locally %6d  quota errors %4d  %s", time.Since(start).Seconds(),
				s.sent, s.ok, s.refused, s.quota, eol)
		}
	}
	progress.Stop()
	if interactive {
		fmt.Fprintln(out)
	}
}

// isTerminal reports whether out is a terminal, where a progress line can be
// rewritten in place.
func isTerminal(out io.Writer) bool {
	f, ok := out.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func newTarget(o options) (*target, error) {
	if !o.real {
		emu := dingtalktest.New(dingtalktest.Options{
			DefaultApp:  "dingdemoapp",
			EgressLimit: o.egressLimit, EgressWindow: 20 * time.Second,
			LatencyMax: o.jitter,
		})
		return &target{base: emu.URL, hosts: []string{emu.Host()}, appKey: "dingdemoapp", emu: emu,
			token: "demo-token", oldPath: "/topapi/v2/user/get", newPath: "/v1.0/contact/users/manager4220"}, nil
	}
	key, secret := os.Getenv("DINGTALK_APP_KEY"), os.Getenv("DINGTALK_APP_SECRET")
	if key == "" || secret == "" {
		return nil, errors.New("-real needs DINGTALK_APP_KEY and DINGTALK_APP_SECRET")
	}
	tok, err := realToken(key, secret)
	if err != nil {
		return nil, err
	}
	return &target{base: "https://oapi.dingtalk.com", appKey: key, token: tok,
		oldPath: "/topapi/v2/department/listsub", newPath: "/topapi/user/count"}, nil
}

// realToken gets an app access token from the old API.
func realToken(key, secret string) (string, error) {
	q := url.Values{"appkey": {key}, "appsecret": {secret}}
	resp, err := http.Get("https://oapi.dingtalk.com/gettoken?" + q.Encode())
	if err != nil {
		// The error quotes the URL, secret and all: only its redacted
		// text goes on, not the error itself.
		return "", fmt.Errorf("gettoken: %v", throttle.RedactError(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	const field = `"access_token":"`
	i := strings.Index(string(body), field)
	if i < 0 {
		return "", fmt.Errorf("gettoken: no token in the answer (status %d)", resp.StatusCode)
	}
	tok := string(body[i+len(field):])
	if j := strings.IndexByte(tok, '"'); j >= 0 {
		tok = tok[:j]
	}
	return tok, nil
}
