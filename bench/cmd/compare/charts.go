package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chart is one PNG written under the docs directory.
type chart struct {
	file, title string
}

const (
	chartThroughput = "bench-throughput.png"
	chartFidelity   = "bench-fidelity.png"
)

func drawCharts(c config, res results) ([]chart, error) {
	var out []chart
	if len(res.tput) > 0 {
		if err := throughputChart(filepath.Join(c.docs, chartThroughput), c, res); err != nil {
			return nil, err
		}
		out = append(out, chart{chartThroughput, "Decision throughput per design"})
	}
	if len(res.fidelity) > 0 {
		if err := fidelityChart(filepath.Join(c.docs, chartFidelity), c, res); err != nil {
			return nil, err
		}
		out = append(out, chart{chartFidelity, "Utilization against violations per design"})
	}
	if len(res.keyCurve) > 0 {
		if err := keyCurveChart(filepath.Join(c.docs, chartKeys), c, res); err != nil {
			return nil, err
		}
		out = append(out, chart{chartKeys, "Decisions per second against distinct keys"})
	}
	more, err := scaleCharts(c, res)
	if err != nil {
		return nil, err
	}
	return append(out, more...), nil
}

func throughputChart(path string, c config, res results) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Decisions per second, %d goroutines, one hot key (%d cores, Redis %s)",
		c.workers, res.machine.cores, res.machine.redis)
	p.X.Label.Text = "decisions per second (in-process x/time/rate off the scale is clipped)"
	var vals plotter.Values
	var names []string
	maxRedis := 0.0
	for _, t := range res.tput {
		if !t.d.local {
			maxRedis = max(maxRedis, t.ops)
		}
	}
	// Bottom to top: the table's order reads top-down.
	for i := len(res.tput) - 1; i >= 0; i-- {
		t := res.tput[i]
		v := t.ops
		name := t.d.name
		if t.d.local && v > 1.5*maxRedis {
			v = 1.5 * maxRedis
			name += fmt.Sprintf(" (%.1fM/s)", t.ops/1e6)
		}
		vals = append(vals, v)
		names = append(names, name)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(14))
	if err != nil {
		return err
	}
	bars.Horizontal = true
	bars.Color = color.RGBA{R: 70, G: 110, B: 180, A: 255}
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalY(names...)
	p.X.Min = 0
	p.Add(plotter.NewGrid())
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}

func fidelityChart(path string, c config, res results) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("DingTalk emulator: %d replicas, demand %dx the %d/s limit, latency 0-%v",
		c.fid.replicas, c.fid.demandX, c.fid.limit, c.fid.latMax)
	p.X.Label.Text = "share of the published rate achieved (%)"
	p.Y.Label.Text = "calls the emulator rejected (% of calls sent, square-root scale)"
	p.Y.Scale = sqrtScale{}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks(0, 1, 2, 5, 10, 20, 30, 50, 75, 100))
	shapes := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
		draw.RingGlyph{}, draw.BoxGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}}
	palette := []color.Color{
		color.RGBA{200, 40, 40, 255}, color.RGBA{40, 90, 200, 255}, color.RGBA{30, 150, 70, 255}, color.RGBA{230, 140, 0, 255},
		color.RGBA{140, 60, 170, 255}, color.RGBA{0, 150, 160, 255}, color.RGBA{120, 120, 120, 255}, color.RGBA{180, 100, 60, 255},
	}
	minX, maxY := 100.0, 1.0
	for i, f := range res.fidelity {
		x, y := 100*f.share, 100*f.rejectedShare
		minX, maxY = min(minX, x), max(maxY, y)
		sc, err := plotter.NewScatter(plotter.XYs{{X: x, Y: y}})
		if err != nil {
			return err
		}
		sc.GlyphStyle.Shape = shapes[i%len(shapes)]
		sc.GlyphStyle.Color = palette[i%len(palette)]
		sc.GlyphStyle.Radius = vg.Points(5)
		l := f.d.name
		if f.d.id == "ours1" {
			l = "throttle (DingTalk preset)"
		}
		if f.skew {
			l += fmt.Sprintf(", clocks ±%v", c.fid.skew)
		}
		l += fmt.Sprintf(": %.1f%%, %d rejected", x, f.rejected)
		p.Add(sc)
		p.Legend.Add(l, sc)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(8)
	p.X.Min, p.X.Max = math.Floor(minX)-15, 101
	p.Y.Min, p.Y.Max = 0, max(5, maxY*1.1)
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}

// sqrtScale spreads the small rejection shares that matter most.
type sqrtScale struct{}

func (sqrtScale) Normalize(lo, hi, x float64) float64 {
	lo, hi, x = math.Sqrt(max(lo, 0)), math.Sqrt(max(hi, 0)), math.Sqrt(max(x, 0))
	if hi == lo {
		return 0
	}
	return (x - lo) / (hi - lo)
}

func ticks(vs ...float64) []plot.Tick {
	out := make([]plot.Tick, len(vs))
	for i, v := range vs {
		out[i] = plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)}
	}
	return out
}
