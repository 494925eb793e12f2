package throttle

import (
	"runtime"

	"github.com/quotaware/throttle/limiter"
	"github.com/redis/go-redis/v9"
)

// buildLimiter picks the limiter: the one given (or built for WithRedis),
// or an in-process one. A Shared limiter, whether built here or given, is
// wired the same way (wireShared).
func (t *Transport) buildLimiter(c *config) {
	t.limiter = c.limiter
	if t.limiter == nil {
		t.limiter = limiter.NewMemory()
	}
	if s, ok := t.limiter.(*limiter.Shared); ok {
		t.wireShared(s, c)
	}
}

// wireShared makes a Shared limiter's news reach this Transport: another
// replica's penalty opens this process's breaker at once, a lift closes
// it, an outage switch shows in the gauge and the log, and every event is
// counted. The Transport owns the limiter from then on: Close closes it.
func (t *Transport) wireShared(s *limiter.Shared, c *config) {
	if !contextTimeouts(s.Client()) {
		c.logger.Warn("throttle: the Redis client ignores context deadlines; set ContextTimeoutEnabled: true in its options, " +
			"or a Redis that stops answering holds requests for the client's read timeout instead of the limiter's timeout")
	}
	// The callbacks hold the telemetry and the breakers, never the
	// Transport, so background goroutines do not keep it from collection.
	tel, mode, addr := t.tel, outageModeName(s.Config().Mode), s.Addr()
	stop := s.Listen(limiter.Listener{
		Switch:  func(down bool, err error) { tel.fallbackSwitch(down, mode, addr, err) },
		Penalty: penaltyRouter(t.profiles, t.head),
		Lift:    liftRouter(t.profiles, c.logger),
		Stale:   staleRouter(t.profiles),
		Event:   limiterEvents(c),
	})
	t.shared = s
	t.unlisten = stop
	// A Transport dropped without Close stops that work once collected;
	// a cleanup must not block, so it only starts the stop.
	runtime.AddCleanup(t, func(s *limiter.Shared) { go s.Close() }, s)
}

// staleRouter closes this process's breaker for a penalty the limiter did
// not record because the provider reset that quota after its call went out
// (limiter.ErrStalePenalty), while the breaker holds that penalty: as the
// answer's penalty is written, or, for one kept through an outage, once
// Redis answers again. Like penaltyRouter, it holds the breakers.
func staleRouter(profiles []profile) func(group string, p limiter.Penalty) {
	byName := profilesByName(profiles)
	return func(group string, p limiter.Penalty) {
		if prof := byName[group]; prof != nil {
			prof.breakers.LiftIf(p.Scope, p.Until, p.Code)
		}
	}
}

// profilesByName indexes profiles by name, for the routers of a Shared
// limiter's news, which name a profile by its group.
func profilesByName(profiles []profile) map[string]*profile {
	byName := make(map[string]*profile, len(profiles))
	for i := range profiles {
		byName[profiles[i].Name] = &profiles[i]
	}
	return byName
}

// outageModeName names a limiter's outage mode for logs.
func outageModeName(m limiter.OutageMode) string {
	switch m {
	case limiter.OutageRefuse:
		return "refuse"
	case limiter.OutageAdmit:
		return "admit"
	}
	return "local"
}

// penaltyRouter opens this process's breaker for a penalty another replica
// wrote, as soon as Redis announces it: a request that booked its slot
// before the penalty then never sends inside it. It holds the breakers, not
// the Transport, so an unreferenced Transport can still be collected.
func penaltyRouter(profiles []profile, learned *headroomLoop) func(group string, p limiter.Penalty) {
	byName := profilesByName(profiles)
	return func(group string, p limiter.Penalty) {
		if prof := byName[group]; prof != nil {
			prof.stop(p.Scope, p.Until, p.Code, "announcement")
			if prof.Lower != nil {
				// The replica that was refused wrote the limit it learned
				// before the penalty: read it while the penalty holds.
				learned.pokeLearned()
			}
		}
	}
}

// contextTimeouts reports whether a go-redis client honours context
// deadlines (ContextTimeoutEnabled), which the fallback timeout relies on.
func contextTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true // unknown implementations: assume they do
}
