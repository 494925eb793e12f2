package throttle

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// limiterEvents returns the counter of what the shared limiter noticed
// (lost state, corrupt values, rejected announcements, an evicting Redis):
// throttle.limiter.events with the attribute event = the kind (see
// limiter.Listener.Event). The limiter logs them itself.
func limiterEvents(c *config) func(kind, group string) {
	if c.telemetry.disabled {
		return nil
	}
	mp := c.telemetry.meter
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	counter, err := mp.Meter(instrumentationName).Int64Counter("throttle.limiter.events", metric.WithUnit("{event}"),
		metric.WithDescription("What the shared limiter noticed, by event: state_lost (Redis lost its state), corrupt_value, "+
			"announcement_rejected (a spoofed or malformed penalty announcement), evictable, penalty_lost."))
	if err != nil {
		c.logger.Warn("throttle: telemetry instrument", "error", err)
		return nil
	}
	return func(kind, _ string) {
		counter.Add(context.Background(), 1, metric.WithAttributes(attribute.String("event", kind)))
	}
}
