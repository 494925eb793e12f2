// Package inspect holds what the shared limiter's state looks like to the
// people on call: the snapshot [github.com/quotaware/throttle/limiter.Shared.Inspect] returns, the
// penalty [github.com/quotaware/throttle/limiter.Shared.LiftPenaltyIf] compares before it lifts, and
// their wording, which cmd/throttlectl prints.
//
// A [State] holds one prefix's live replicas, the faults they report and,
// per provider group, its active penalties and each rule key's state, all
// on Redis's clock. Reading it only reads, with bounded memory: each bound
// met is said ([GroupState.Truncated], [State.Complete]), never passed over.
//
//	st, err := shared.Inspect(ctx, "dingtalk")
//	if errors.Is(err, inspect.ErrNoKeys) { /* wrong prefix? */ }
//	for _, g := range st.Groups {
//		for _, p := range g.Penalties {
//			log.Printf("%s: code %s for %s", p.Scope, p.Code, inspect.FormatLeft(p.Left))
//		}
//	}
//
// The snapshot's shape follows the state it describes, and may grow with it.
package inspect
