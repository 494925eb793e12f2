package throttle

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// baseFunc is a base transport of one function.
type baseFunc func(*http.Request) (*http.Response, error)

func (f baseFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// warnings counts WARN lines.
type warnings struct {
	slog.Handler
	n *atomic.Int32
}

func (w warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.n.Add(1)
	}
	return nil
}

func (warnings) Enabled(context.Context, slog.Level) bool { return true }

// A quota whose readings keep failing is read again after a minute, two,
// four ..., never later than Every, and warned of once a run of failures;
// a reading that works ends the run. A request naming it with another
// Host replaces the target, so the next reading takes the new way.
func TestQuotaReadingsBackOff(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	base := baseFunc(func(req *http.Request) (*http.Response, error) {
		if fail.Load() {
			return nil, errors.New("connection refused")
		}
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	})
	tr := MustNew(WithBase(base), WithoutRetry(), WithoutTelemetry(), WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { tr.Close() })
	var warns atomic.Int32
	q := &quotaChecker{tr: weak.Make(tr), done: context.Background(), log: slog.New(warnings{slog.DiscardHandler, &warns})}
	check := &providers.QuotaCheck{
		Every: 15 * time.Minute,
		Query: func(ctx context.Context, t providers.QuotaTarget) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodPost, t.Origin+"/quota", strings.NewReader("{}"))
		},
		Read: func(*http.Response) (providers.QuotaReading, error) { return providers.QuotaReading{Limit: 100}, nil },
	}
	qt := providers.QuotaTarget{App: "wx1", API: "/a", Rule: rule.Must(rule.NewCalendar("day:wx1:/a", 100, rule.Day, time.UTC)),
		Origin: "https://api.example", Token: "tok"}
	p := &profile{Profile: providers.Profile{Name: "p"}, lowered: new(atomic.Int64)}
	// Kept as note keeps a new quota, without arming a round of readings
	// beside the test's own.
	e := &quotaEntry{key: quotaTargetKey{"p", qt.Rule.Key()}, p: p, check: check}
	first := qt // note keeps a copy of each target
	e.cur.Store(&first)
	e.named.Store(time.Now().UnixNano())
	q.targets.Store(e.key, e)
	q.n.Add(1)
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute} {
		before := time.Now()
		q.read(tr, e)
		if got := e.next.Sub(before); got < want || got > want+time.Second {
			t.Fatalf("failure %d: next reading in %v, want %v", i+1, got, want)
		}
	}
	if n := warns.Load(); n != 1 {
		t.Fatalf("%d WARN lines for a run of 6 failures, want 1", n)
	}
	fail.Store(false)
	q.read(tr, e)
	if e.fails != 0 {
		t.Fatalf("%d failures counted after a reading that worked, want 0", e.fails)
	}
	qt.Host = "api.weixin.qq.com"
	q.note(p, check, qt)
	if got := e.cur.Load().Host; got != qt.Host {
		t.Fatalf("target's Host %q after a request through a gateway, want %q", got, qt.Host)
	}
}
