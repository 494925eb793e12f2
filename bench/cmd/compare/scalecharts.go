package main

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The charts of the cost curves beside table 7's: p99 latency against the
// number of keys, Redis memory against orgs × APIs (table 8), decisions
// per second against replica processes (table 9), and one node against a
// 3-master cluster (table 10).

const (
	chartKeysP99  = "bench-keys-p99.png"
	chartISV      = "bench-isv-memory.png"
	chartReplicas = "bench-replicas.png"
	chartCluster  = "bench-cluster.png"
)

// scaleCharts draws the charts whose measurements res holds.
func scaleCharts(c config, res results) ([]chart, error) {
	var out []chart
	add := func(file, title string, draw func(string) error) error {
		if err := draw(filepath.Join(c.docs, file)); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, chart{file, title})
		return nil
	}
	if len(res.keyCurve) > 0 {
		if err := add(chartKeysP99, "p99 latency against distinct keys", func(p string) error { return keysP99Chart(p, c, res) }); err != nil {
			return nil, err
		}
	}
	if rows := res.scaleRows.isv; len(rows) > 0 {
		if err := add(chartISV, "Redis memory against orgs × APIs", func(p string) error { return isvChart(p, rows) }); err != nil {
			return nil, err
		}
	}
	if rows := res.scaleRows.replicas; len(rows) > 0 {
		if err := add(chartReplicas, "Decisions per second against replica processes", func(p string) error { return replicasChart(p, rows) }); err != nil {
			return nil, err
		}
	}
	if rows := res.scaleRows.cluster; len(rows) > 0 {
		if err := add(chartCluster, "One node against a 3-master cluster", func(p string) error { return clusterChart(p, rows) }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// lineChart is a chart of lines with points, one per series, in order.
func lineChart(title, x, y string, logX bool, names []string, series []plotter.XYs) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	for i, xy := range series {
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color, points.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(names[i], line, points)
	}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	return p, nil
}

func keysP99Chart(path string, c config, res results) error {
	var names []string
	var series []plotter.XYs
	for _, d := range keyCurveDesigns() {
		var xy plotter.XYs
		for _, kp := range res.keyCurve {
			xy = append(xy, plotter.XY{X: float64(kp.n), Y: float64(kp.t[d.id].p99.Microseconds())})
		}
		names, series = append(names, d.name), append(series, xy)
	}
	p, err := lineChart(fmt.Sprintf("p99 latency against distinct keys, %d goroutines (%d cores, Redis %s)", c.workers, res.machine.cores, res.machine.redis),
		"distinct keys (this project: rule sets of one group)", "p99 µs", true, names, series)
	if err != nil {
		return err
	}
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}

func isvChart(path string, rows []isvRow) error {
	var used, keys plotter.XYs
	for _, r := range rows {
		x := float64(r.orgs)
		used = append(used, plotter.XY{X: x, Y: float64(r.peakBytes) / (1 << 20)})
		keys = append(keys, plotter.XY{X: x, Y: float64(r.usedBytes) / (1 << 20)})
	}
	p, err := lineChart(fmt.Sprintf("Redis memory of a DingTalk ISV suite, %d APIs per org (every key expires)", rows[0].apis),
		"orgs", "MiB", true, []string{"most used_memory added at once", "used_memory added once done"}, []plotter.XYs{used, keys})
	if err != nil {
		return err
	}
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}

func replicasChart(path string, rows []replicaRow) error {
	var names []string
	var series []plotter.XYs
	for _, r := range rows {
		if len(names) == 0 || names[len(names)-1] != r.design {
			names, series = append(names, r.design), append(series, nil)
		}
		series[len(series)-1] = append(series[len(series)-1], plotter.XY{X: float64(r.replicas), Y: r.perSec})
	}
	p, err := lineChart("Decisions per second against replica processes on one Redis (2 cores shared)",
		"replica processes", "decisions per second, all replicas", false, names, series)
	if err != nil {
		return err
	}
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}

func clusterChart(path string, rows []clusterRow) error {
	p := plot.New()
	p.Title.Text = "Decisions per second: one node against a 3-master cluster (2 cores shared)"
	p.Y.Label.Text = "decisions per second"
	var single, cluster plotter.Values
	var names []string
	for _, r := range rows {
		single, cluster, names = append(single, r.single), append(cluster, r.cluster), append(names, r.design)
	}
	w := vg.Points(24)
	for i, v := range []plotter.Values{single, cluster} {
		bars, err := plotter.NewBarChart(v, w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(2*i-1) * w / 2
		p.Add(bars)
		p.Legend.Add([]string{"one node", "3-master cluster"}[i], bars)
	}
	p.Legend.Top = true
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}
