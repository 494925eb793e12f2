package throttle

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/quotaware/throttle/internal/circuit"
)

// The gauges throttle.breakers.open and throttle.limiter.fallback are
// observed once per MeterProvider for the whole process, by provider: each
// Transport adds its breakers and its fallback state while it lives, and
// Close (or the collection of a dropped Transport) takes them out. The
// callback holds those, never a Transport, so it keeps none alive; when the
// last Transport of a MeterProvider goes, the callback is unregistered.

// gaugeSource is what one Transport contributes to the gauges.
type gaugeSource struct {
	providers []string
	breakers  []*circuit.Set
	fallback  *atomic.Int64 // 1 while the Transport's limiter is in fallback
}

// gaugeGroup is the registration of one MeterProvider. Its callback takes
// only mu, never gaugesMu, and Unregister is called with neither held: the
// SDK holds its own lock while it runs callbacks.
type gaugeGroup struct {
	reg     metric.Registration
	mu      sync.Mutex
	sources map[*gaugeSource]struct{}
}

var (
	gaugesMu sync.Mutex
	gauges   = map[metric.MeterProvider]*gaugeGroup{}
)

// addGauges registers src with mp's gauges, registering them first if it is
// the first source of mp. It returns the function that takes src out.
func addGauges(mp metric.MeterProvider, src *gaugeSource, report func(error)) (remove func()) {
	if !reflect.TypeOf(mp).Comparable() {
		// Cannot be a map key: a registration of this Transport's own.
		g := &gaugeGroup{sources: map[*gaugeSource]struct{}{src: {}}}
		g.reg = registerGauges(mp, g, report)
		var once sync.Once
		return func() { once.Do(func() { unregister(g.reg, report) }) }
	}
	gaugesMu.Lock()
	g := gauges[mp]
	if g == nil {
		g = &gaugeGroup{sources: make(map[*gaugeSource]struct{})}
		g.reg = registerGauges(mp, g, report)
		gauges[mp] = g
	}
	g.mu.Lock()
	g.sources[src] = struct{}{}
	g.mu.Unlock()
	gaugesMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			gaugesMu.Lock()
			g.mu.Lock()
			delete(g.sources, src)
			last := len(g.sources) == 0
			g.mu.Unlock()
			if last && gauges[mp] == g {
				delete(gauges, mp)
			} else {
				last = false
			}
			gaugesMu.Unlock()
			if last {
				unregister(g.reg, report)
			}
		})
	}
}

func unregister(reg metric.Registration, report func(error)) {
	if reg != nil {
		report(reg.Unregister())
	}
}

// registerGauges creates the two gauges on mp and one callback observing
// g's sources.
func registerGauges(mp metric.MeterProvider, g *gaugeGroup, report func(error)) metric.Registration {
	m := mp.Meter(instrumentationName)
	open, err := m.Int64ObservableGauge("throttle.breakers.open", metric.WithUnit("{breaker}"),
		metric.WithDescription("Scopes whose breaker is open (penalised) in this process, by provider."))
	report(err)
	fallback, err := m.Int64ObservableGauge("throttle.limiter.fallback", metric.WithUnit("1"),
		metric.WithDescription("1 while the shared limiter of a Transport of the provider is unavailable and the fallback applies."))
	report(err)
	if open == nil || fallback == nil {
		return nil
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		type state struct{ open, fallback int64 }
		byProvider := make(map[string]*state)
		for src := range g.sources {
			down := src.fallback.Load()
			for i, name := range src.providers {
				st := byProvider[name]
				if st == nil {
					st = &state{}
					byProvider[name] = st
				}
				st.open += int64(src.breakers[i].Open())
				st.fallback = max(st.fallback, down)
			}
		}
		for name, st := range byProvider {
			attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("provider", name)))
			o.ObserveInt64(open, st.open, attrs)
			o.ObserveInt64(fallback, st.fallback, attrs)
		}
		return nil
	}, open, fallback)
	report(err)
	return reg
}
