package loadtest

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// Waits reads, for each call, the wait its limiter scheduled: the
// Transport's span attribute throttle.wait_s, which is the slot's delay as
// the limiter computed it on Redis's clock, not a wall-clock measurement, so
// a loaded machine cannot make it look longer. A call whose Transport
// recorded no span did not wait.
type Waits struct {
	spans  *tracetest.InMemoryExporter
	tracer trace.Tracer
}

// TracedReplicas is Replicas with the Transports' spans recorded, so that
// w tells each call's scheduled wait.
func TracedReplicas(t *testing.T, n int, opts ...throttle.Option) (clients []*http.Client, w *Waits) {
	t.Helper()
	SkipShort(t)
	w = &Waits{spans: tracetest.NewInMemoryExporter()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(w.spans))
	w.tracer = tp.Tracer("loadtest")
	rdb := redistest.Shared(t)
	prefix := limitertest.Group(t)
	quiet := slog.New(slog.DiscardHandler)
	for range n {
		base := &http.Transport{MaxIdleConnsPerHost: 256}
		tr := throttle.MustNew(append([]throttle.Option{
			Shared(t, rdb.Client(t), prefix),
			throttle.WithBase(base), throttle.WithLogger(quiet), throttle.WithTracerProvider(tp),
		}, opts...)...)
		t.Cleanup(func() {
			tr.Close()
			base.CloseIdleConnections()
		})
		clients = append(clients, &http.Client{Transport: tr})
	}
	return clients, w
}

// Start returns ctx carrying a span that names one call: the Transport's
// span for it is that span's child. Call end once the call is over.
func (w *Waits) Start(ctx context.Context) (_ context.Context, id trace.SpanID, end func()) {
	ctx, span := w.tracer.Start(ctx, "call")
	return ctx, span.SpanContext().SpanID(), func() { span.End() }
}

// Wait is what a Transport recorded for one call.
type Wait struct {
	Scheduled time.Duration // the wait the limiter scheduled
	Outcome   string        // the Transport's outcome ("waited", "throttled", ...)
}

// Of returns the recorded waits, by the id Start gave the call; a call
// missing from it did not wait.
func (w *Waits) Of() map[trace.SpanID]Wait {
	out := make(map[trace.SpanID]Wait)
	for _, s := range w.spans.GetSpans() {
		if !strings.HasPrefix(s.Name, "throttle ") {
			continue
		}
		var got Wait
		for _, kv := range s.Attributes {
			switch kv.Key {
			case "throttle.wait_s":
				got.Scheduled = time.Duration(kv.Value.AsFloat64() * float64(time.Second))
			case "throttle.outcome":
				got.Outcome = kv.Value.AsString()
			}
		}
		out[s.Parent.SpanID()] = got
	}
	return out
}

// Shared is the limiter of one replica: a limiter.Shared on client under
// prefix that gives Redis 2 s to answer before the replica falls back to
// its local share. Acceptance tests run on loaded machines, where Redis can
// miss the default 250 ms, and a replica that falls back starts its local
// window empty: that is the fallback's documented trade-off, not what
// those tests measure.
func Shared(t testing.TB, client redis.UniversalClient, prefix string) throttle.Option {
	s, err := limiter.NewShared(client, limiter.SharedConfig{Prefix: prefix, Timeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return throttle.WithLimiter(s)
}
