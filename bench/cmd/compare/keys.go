package main

import (
	"context"
	"fmt"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The cost curve: decisions per second and p99 latency against the number
// of distinct keys the decisions go to in turn, this project (coalesced and
// one call each) beside redis_rate and the one-round-trip ceiling, every
// design at every size in the same run.

// keyCounts are the sizes of the curve.
var keyCounts = []int{1, 10, 100, 1_000, 10_000, 100_000}

// keyPoint is one design's throughput over n keys.
type keyPoint struct {
	n int
	t map[string]tput // by design id
}

// keyCurveDesigns are the designs that decide over many keys.
func keyCurveDesigns() []design {
	var out []design
	for _, d := range designs() {
		switch d.id {
		case "ours1", "ours1single", "redisrate", "ceiling":
			out = append(out, d)
		}
	}
	return out
}

func runKeyCurve(ctx context.Context, addr string, c config) ([]keyPoint, error) {
	ds := keyCurveDesigns()
	var out []keyPoint
	for _, n := range keyCounts {
		kp := keyPoint{n: n, t: map[string]tput{}}
		for round := range c.rounds {
			for _, d := range ds {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				p := params{key: fmt.Sprintf("t7-%s-%d-%d", d.id, n, round), limit: 1_000_000, period: time.Second,
					replicas: 1, burst: 1_000_000, keys: n}
				t, err := runThroughputAt(ctx, addr, d, c.workers, c.tputWarmup, c.tputDur, p)
				if err != nil {
					return nil, err
				}
				if b, ok := kp.t[d.id]; !ok || t.ops > b.ops {
					kp.t[d.id] = t
				}
			}
		}
		logf("table 7: %6d keys: coalesced %.0f/s (%.2f× ceiling, %.1f µs in Redis), one call %.0f/s (%.2f× redis_rate, %.1f µs), redis_rate %.0f/s (%.1f µs), ceiling %.0f/s (%.1f µs)",
			n, kp.t["ours1"].ops, kp.t["ours1"].ops/kp.t["ceiling"].ops, kp.t["ours1"].serverUs, kp.t["ours1single"].ops,
			kp.t["ours1single"].ops/kp.t["redisrate"].ops, kp.t["ours1single"].serverUs, kp.t["redisrate"].ops, kp.t["redisrate"].serverUs,
			kp.t["ceiling"].ops, kp.t["ceiling"].serverUs)
		out = append(out, kp)
	}
	return out, nil
}

func reportKeyCurve(w func(string, ...any), c config, rows []keyPoint, mline string) {
	w("## 7. Cost against the number of distinct keys\n\n")
	w("%d goroutines of one replica decide on a limit far above the load (as in table 1), each decision going\n", c.workers)
	w("to the next of n keys in turn. For this project the n keys are n rule sets of one group (one hash tag,\n")
	w("as the rules of one provider are): coalescing joins the requests of a group that arrive while calls\n")
	w("for it are in flight, whatever their rules, in one lean call (up to two in flight when they book no rule\n")
	w("in common). redis_rate and the ceiling (`EVALSHA return 1`) use n\n")
	w("plain keys. %v per design and size after %v of warm-up, %d interleaved rounds, the best kept.\n\n%s\n\n",
		c.tputDur, c.tputWarmup, c.rounds, mline)
	w("| keys | throttle, coalesced: decisions/s, p99 µs | one call each: decisions/s, p99 µs | redis_rate: decisions/s, p99 µs | ceiling: decisions/s, p99 µs | coalesced / ceiling | one call each / redis_rate |\n")
	w("|---:|---|---|---|---|---:|---:|\n")
	for _, kp := range rows {
		o, s, r, x := kp.t["ours1"], kp.t["ours1single"], kp.t["redisrate"], kp.t["ceiling"]
		w("| %d | %.0f, %d | %.0f, %d | %.0f, %d | %.0f, %d | %.2f× | %.2f× |\n", kp.n,
			o.ops, o.p99.Microseconds(), s.ops, s.p99.Microseconds(), r.ops, r.p99.Microseconds(),
			x.ops, x.p99.Microseconds(), o.ops/x.ops, s.ops/r.ops)
	}
	w("\n")
}

// chartKeys is the cost curve's chart.
const chartKeys = "bench-keys.png"

// keyCurveChart draws decisions per second against the number of keys,
// one line per design, the keys on a log scale.
func keyCurveChart(path string, c config, res results) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Decisions per second against distinct keys, %d goroutines (%d cores, Redis %s)",
		c.workers, res.machine.cores, res.machine.redis)
	p.X.Label.Text = "distinct keys (this project: rule sets of one group)"
	p.Y.Label.Text = "decisions per second"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	for i, d := range keyCurveDesigns() {
		var xy plotter.XYs
		for _, kp := range res.keyCurve {
			xy = append(xy, plotter.XY{X: float64(kp.n), Y: kp.t[d.id].ops})
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(d.name, line, points)
	}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}
