package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// metric is one column where designs are ranked.
type metric struct {
	table, name string
	lowerBetter bool
	// tied reports whether a is as good as best within measurement noise.
	tied   func(a, best float64) bool
	format func(float64) string
	// reason explains why this project is behind, when it is; reasons
	// overrides it for one of this project's rows.
	reason  string
	reasons map[string]string
}

type entry struct {
	name string
	ours bool
	v    float64
}

func within(rel, abs float64) func(a, best float64) bool {
	return func(a, best float64) bool { return math.Abs(a-best) <= math.Max(abs, rel*math.Abs(best)) }
}

// verdicts states, for every ranked column, whether this project is first,
// tied, or behind, and why when behind.
func verdicts(res results) string {
	var lines []string
	judge := func(m metric, es []entry) {
		for _, e := range es {
			if !e.ours {
				continue
			}
			// Each of this project's rows against the peers alone.
			best, peers := e, 0
			for _, o := range es {
				if o.ours {
					continue
				}
				peers++
				if m.lowerBetter && o.v < best.v || !m.lowerBetter && o.v > best.v {
					best = o
				}
			}
			if peers == 0 {
				continue
			}
			var ties []string
			for _, o := range es {
				if !o.ours && m.tied(o.v, e.v) {
					ties = append(ties, o.name)
				}
			}
			switch {
			case best.name == e.name && len(ties) == 0:
				lines = append(lines, fmt.Sprintf("- %s, %s: **%s is first** (%s).", m.table, m.name, e.name, m.format(e.v)))
			case best.name == e.name || m.tied(e.v, best.v):
				lines = append(lines, fmt.Sprintf("- %s, %s: %s is **tied for first** with %s (%s; best %s).",
					m.table, m.name, e.name, strings.Join(ties, ", "), m.format(e.v), m.format(best.v)))
			default:
				l := fmt.Sprintf("- %s, %s: **%s is not first**: %s has %s against %s.", m.table, m.name, e.name, best.name, m.format(best.v), m.format(e.v))
				if r, ok := m.reasons[e.name]; ok {
					l += " " + r
				} else if m.reason != "" {
					l += " " + m.reason
				}
				lines = append(lines, l)
			}
		}
	}
	us := func(v float64) string { return fmt.Sprintf("%.0f µs", v) }
	ms := func(v float64) string { return fmt.Sprintf("%.1f ms", v) }

	if len(res.tput) > 0 {
		var ops, p50, p99, allocs []entry
		for _, t := range res.tput {
			if t.d.ceiling || t.d.local {
				continue
			}
			ours := strings.HasPrefix(t.d.id, "ours")
			ops = append(ops, entry{t.d.name, ours, t.ops})
			p50 = append(p50, entry{t.d.name, ours, float64(t.p50.Microseconds())})
			p99 = append(p99, entry{t.d.name, ours, float64(t.p99.Microseconds())})
			allocs = append(allocs, entry{t.d.name, ours, t.allocs})
		}
		var singleUs, fixedUs, rateUs, ceilUs, ours3Us float64
		ratios := map[string]float64{}
		for _, t := range res.tput {
			switch t.d.id {
			case "ours1", "ours1single":
				ratios[t.d.name] = t.ratio
				if t.d.id == "ours1single" {
					singleUs = t.serverUs
				}
			case "ours3":
				ours3Us = t.serverUs
			case "fixed":
				fixedUs = t.serverUs
			case "redisrate":
				rateUs = t.serverUs
			case "ceiling":
				ceilUs = t.serverUs
			}
		}
		why := fmt.Sprintf("The gap is inside Redis, which runs every script on one thread: one call of the one-rule "+
			"script spends %.1f µs of Redis time (redis_rate %.1f, the fixed window %.1f, the ceiling %.1f, column "+
			"Redis µs). It makes three calls from Lua into Redis, `TIME`, `MGET` (the rule's key and the group's "+
			"epoch marker, by which replicas notice a lost state, read only once a request waits) and `SET ... PX`, "+
			"and returns the booked state as exact integer microseconds; redis_rate makes `TIME`, `GET` and `SET` "+
			"with float seconds, and the fixed-window designs make one or two calls and never read Redis's clock; "+
			"they pay for that in tables 2 and 3. Coalescing (the default) spreads one call over the requests that "+
			"arrive while calls are in flight.", singleUs, rateUs, fixedUs, ceilUs)
		why3 := fmt.Sprintf("This row checks three penalty keys and charges three rules in each decision (%.1f µs "+
			"of Redis time per decision), which no peer does: each peer row decides one limit, and keeping three "+
			"would take it three calls.", ours3Us)
		reasons := map[string]string{"throttle, 3 rules + 3 scopes": why3, "throttle, 1 rule, one call each": why}
		for _, name := range []string{"throttle, 1 rule", "throttle, 1 rule, one call each"} {
			r, ok := ratios[name]
			if !ok || r == 0 {
				continue
			}
			if r >= 0.6 {
				lines = append(lines, fmt.Sprintf("- Table 1, ratio to the ceiling: %s runs at %.2f of the ceiling, "+
					"which meets the 60%% target.", name, r))
			} else {
				lines = append(lines, fmt.Sprintf("- Table 1, ratio to the ceiling: %s runs at %.2f of the ceiling, "+
					"which **misses** the 60%% target. %s", name, r, why))
			}
		}
		judge(metric{table: "Table 1", name: "decisions/s (Redis designs)", tied: within(0.05, 0), format: func(v float64) string { return fmt.Sprintf("%.0f/s", v) }, reason: why, reasons: reasons}, ops)
		judge(metric{table: "Table 1", name: "p50 latency", lowerBetter: true, tied: within(0.05, 20), format: us, reason: "Same cause as throughput.", reasons: reasons}, p50)
		judge(metric{table: "Table 1", name: "p99 latency", lowerBetter: true, tied: within(0.10, 50), format: us, reason: "Same cause as throughput; tail latency also moves most with the machine's other load.", reasons: reasons}, p99)
		judge(metric{table: "Table 1", name: "allocations per decision", lowerBetter: true, tied: within(0, 0.5),
			format: func(v float64) string { return fmt.Sprintf("%.1f", v) }}, allocs)
	}

	if len(res.contention) > 0 {
		var calls, longest, inv, late50, late99, mem []entry
		for _, r := range res.contention {
			ours := strings.HasPrefix(r.d.id, "ours")
			if !r.d.local {
				calls = append(calls, entry{r.d.name, ours, r.callsPerAdmit})
				mem = append(mem, entry{r.d.name, ours, float64(r.mem.bytes)})
			}
			longest = append(longest, entry{r.d.name, ours, float64(r.longestWait) / float64(time.Millisecond)})
			inv = append(inv, entry{r.d.name, ours, float64(r.inversions)})
			if r.waited > 0 {
				late50 = append(late50, entry{r.d.name, ours, float64(r.late50.Microseconds())})
				late99 = append(late99, entry{r.d.name, ours, float64(r.late99.Microseconds())})
			}
		}
		judge(metric{table: "Table 2", name: "Redis calls per admitted request", lowerBetter: true, tied: within(0, 0.02),
			format: func(v float64) string { return fmt.Sprintf("%.2f", v) }}, calls)
		judge(metric{table: "Table 2", name: "longest wait", lowerBetter: true, tied: within(0.05, 50), format: ms,
			reason: "With reservations every waiter is served in arrival order, so the last of 64 waiters on a 20/s " +
				"rule waits about 64/20 s; a reject-only design that lets some callers in early shortens a few waits " +
				"and lengthens others (see the inversions)."}, longest)
		judge(metric{table: "Table 2", name: "order inversions", lowerBetter: true, tied: within(0, 0),
			format: func(v float64) string { return fmt.Sprintf("%.0f", v) }}, inv)
		lateWhy := "The numbers do not measure the same thing: this project's lateness runs from the booked slot on " +
			"Redis's clock to the send in the replica, so it holds the reply's trip back from Redis (a few hundred " +
			"µs on these two loaded cores) on top of the wake's own slack (about 0.1 ms: the last 2 ms of a wait " +
			"run on a nanosleep thread, where a Go timer wakes up to 1 ms late), while a local limiter's runs from " +
			"its own clock. Waking at the slot mapped onto the replica's clock would need an estimate of the " +
			"offset between the two clocks, which can err towards sending early; the library never sends before " +
			"its slot."
		judge(metric{table: "Table 4", name: "lateness p50", lowerBetter: true, tied: within(0.10, 100), format: us, reason: lateWhy}, late50)
		judge(metric{table: "Table 4", name: "lateness p99", lowerBetter: true, tied: within(0.10, 200), format: us, reason: lateWhy}, late99)
		judge(metric{table: "Table 5", name: "Redis memory per limit", lowerBetter: true, tied: within(0.05, 8),
			format: func(v float64) string { return fmt.Sprintf("%.0f B", v) },
			reason: "Its state is one key per rule holding a microsecond timestamp as a 16-digit string with an " +
				"expiry; a counter that fits Redis's integer encoding takes a few bytes less."}, mem)
	}

	if len(res.fidelity) > 0 {
		var rej, share, calls []entry
		var cleanFull, dirtyFull []string
		oursShare := 0.0
		for _, f := range res.fidelity {
			if f.skew {
				continue
			}
			ours := strings.HasPrefix(f.d.id, "ours")
			name := f.d.name
			if ours {
				name = "throttle (DingTalk preset)"
				oursShare = f.share
			}
			rej = append(rej, entry{name, ours, float64(f.rejected)})
			if !f.d.local {
				calls = append(calls, entry{name, ours, f.callsPerSent})
			}
			share = append(share, entry{name, ours, 100 * f.share})
		}
		for _, f := range res.fidelity {
			if f.skew || strings.HasPrefix(f.d.id, "ours") || f.share <= oursShare+0.01 {
				continue
			}
			if f.rejected == 0 {
				cleanFull = append(cleanFull, f.d.name)
			} else {
				dirtyFull = append(dirtyFull, fmt.Sprintf("%s (%d rejected)", f.d.name, f.rejected))
			}
		}
		shareWhy := "By design: the DingTalk preset keeps 20 calls in any 1.05 s (a latency allowance it measures, " +
			"starting at 50 ms; `Config.Jitter` fixes it), i.e. 19.05/s, 95.2% of the published rate, so that latency " +
			"varying by up to 50 ms never puts 21 calls in one provider second; `NoJitter` paces at the full 20/s."
		if len(dirtyFull) > 0 {
			shareWhy += " " + strings.Join(dirtyFull, ", ") + " got more through by also sending calls the provider rejected."
		}
		if len(cleanFull) > 0 {
			shareWhy += " " + strings.Join(cleanFull, ", ") + " got more through with no rejection in this run: " +
				"at 0–20 ms of jitter their schedule did not happen to put 21 calls in one provider second, so here " +
				"the 50 ms allowance cost rate and bought nothing measurable; it pays when latency varies more, or " +
				"against the designs that burst or read skewed clocks (same table)."
		}
		judge(metric{table: "Table 3", name: "calls rejected by the emulator", lowerBetter: true, tied: within(0, 0),
			format: func(v float64) string { return fmt.Sprintf("%.0f", v) },
			reason: "With latency varying by up to 20 ms, calls paced right under the limit can still land more " +
				"than the limit in one of the provider's wall-clock seconds."}, rej)
		judge(metric{table: "Table 3", name: "Redis calls per call sent", lowerBetter: true, tied: within(0.05, 0),
			format: func(v float64) string { return fmt.Sprintf("%.2f", v) }}, calls)
		judge(metric{table: "Table 3", name: "share of the published rate", tied: within(0, 1),
			format: func(v float64) string { return fmt.Sprintf("%.1f%%", v) }, reason: shareWhy}, share)
	}
	if len(lines) == 0 {
		return "Nothing was ranked in this run.\n"
	}
	return strings.Join(lines, "\n") + "\n"
}
