package bench

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The charts' size: wide enough for a README, small enough inline.
const (
	chartWidth  = 16 * vg.Centimeter
	chartHeight = 9 * vg.Centimeter
	// barWidth is one bar of the CPU-per-operation chart.
	barWidth = 1.2 * vg.Centimeter
	// legendHeadroom stretches the y axis above the data so the legend,
	// top right, does not hide the lines.
	legendHeadroom = 1.35
)

// chartRun is one run of a flow as charted: its name in the legend
// ("surge", "do-nothing server"), its timeline, and its whole-run CPU per
// operation (nil when the server's CPU was not read).
type chartRun struct {
	Name       string
	Points     []TimelinePoint
	CPUPerOpUs *float64
}

// chartGroup is one flow (or level) and its runs, charted together;
// File prefixes its charts' file names and Unit names one operation
// ("reservation"; empty: "operation").
type chartGroup struct {
	Name string
	File string
	Unit string
	Runs []chartRun
}

func (g chartGroup) unit() string {
	if g.Unit == "" {
		return "operation"
	}
	return g.Unit
}

// chart is one rendered SVG: its file name in --charts and its title.
type chart struct {
	File  string
	Title string
	SVG   []byte
}

// renderCharts draws, for each group, throughput, latency percentiles and
// CPU per operation over time, one line per run; then one bar chart of the
// whole runs' CPU per operation across groups.
func renderCharts(groups []chartGroup) ([]chart, error) {
	var out []chart
	for _, g := range groups {
		for _, draw := range []func(chartGroup) (chart, error){throughputChart, latencyChart, cpuTimeChart} {
			c, err := draw(g)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	c, err := cpuBarChart(groups)
	if err != nil {
		return nil, err
	}
	if c.SVG != nil {
		out = append(out, c)
	}
	return out, nil
}

func newPlot(title, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since the run's start"
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// addLine adds one series: (seconds, y(point)) for every point where y
// is known; colour and dashes pick its style (plotutil's palettes).
func addLine(p *plot.Plot, name string, colour, dashes int, points []TimelinePoint, y func(TimelinePoint) (float64, bool)) error {
	xys := make(plotter.XYs, 0, len(points))
	for _, pt := range points {
		if v, ok := y(pt); ok {
			xys = append(xys, plotter.XY{X: pt.Seconds, Y: v})
		}
	}
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("chart %s: %w", name, err)
	}
	l.Color = plotutil.Color(colour)
	l.Dashes = plotutil.Dashes(dashes)
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func throughputChart(g chartGroup) (chart, error) {
	p := newPlot(g.Name+": throughput", g.unit()+"s per second")
	for i, r := range g.Runs {
		if err := addLine(p, r.Name, i, 0, r.Points, func(pt TimelinePoint) (float64, bool) { return pt.PerSecond(), true }); err != nil {
			return chart{}, err
		}
	}
	return save(p, g.File+"-throughput.svg")
}

// latencyPercentiles are the latency chart's lines per run, in order.
var latencyPercentiles = []struct {
	name string
	us   func(TimelinePoint) int64
}{
	{"p50", func(pt TimelinePoint) int64 { return pt.P50Us }},
	{"p99", func(pt TimelinePoint) int64 { return pt.P99Us }},
}

// latencyChart has p50 and p99 of each run: p50 solid, p99 dashed, in
// the run's colour.
func latencyChart(g chartGroup) (chart, error) {
	p := newPlot(g.Name+": latency percentiles", "milliseconds")
	for i, r := range g.Runs {
		for q, pc := range latencyPercentiles {
			err := addLine(p, r.Name+" "+pc.name, i, q, r.Points, func(pt TimelinePoint) (float64, bool) {
				return float64(pc.us(pt)) / 1000, pt.Ops > 0
			})
			if err != nil {
				return chart{}, err
			}
		}
	}
	return save(p, g.File+"-latency.svg")
}

func cpuTimeChart(g chartGroup) (chart, error) {
	p := newPlot(g.Name+": server CPU per "+g.unit(), "CPU microseconds per "+g.unit())
	for i, r := range g.Runs {
		if err := addLine(p, r.Name, i, 0, r.Points, TimelinePoint.CPUPerOpUs); err != nil {
			return chart{}, err
		}
	}
	return save(p, g.File+"-cpu.svg")
}

// cpuBarChart compares the whole runs' CPU per operation, one cluster of
// bars per group; an empty chart (no CPU read anywhere) has no SVG.
func cpuBarChart(groups []chartGroup) (chart, error) {
	if len(groups) == 0 {
		return chart{}, nil
	}
	p := plot.New()
	p.Title.Text = "server CPU per " + groups[0].unit() + ", whole run"
	p.Y.Label.Text = "CPU microseconds per " + groups[0].unit()
	p.Legend.Top = true
	names := make([]string, len(groups))
	var runNames []string
	for i, g := range groups {
		names[i] = g.Name
		for _, r := range g.Runs {
			if !containsString(runNames, r.Name) {
				runNames = append(runNames, r.Name)
			}
		}
	}
	drawn := false
	for ri, name := range runNames {
		vals := make(plotter.Values, len(groups))
		for gi, g := range groups {
			for _, r := range g.Runs {
				if r.Name == name && r.CPUPerOpUs != nil {
					vals[gi], drawn = *r.CPUPerOpUs, true
				}
			}
		}
		b, err := plotter.NewBarChart(vals, barWidth)
		if err != nil {
			return chart{}, fmt.Errorf("chart cpu per operation: %w", err)
		}
		b.Color = plotutil.Color(ri)
		b.LineStyle.Width = 0
		b.Offset = barWidth * vg.Length(float64(ri)-float64(len(runNames)-1)/2)
		p.Add(b)
		p.Legend.Add(name, b)
	}
	if !drawn {
		return chart{}, nil
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	return save(p, "cpu-per-op.svg")
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func save(p *plot.Plot, file string) (chart, error) {
	p.Y.Max *= legendHeadroom
	w, err := p.WriterTo(chartWidth, chartHeight, "svg")
	if err != nil {
		return chart{}, fmt.Errorf("chart %s: %w", file, err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return chart{}, fmt.Errorf("chart %s: %w", file, err)
	}
	return chart{File: file, Title: p.Title.Text, SVG: buf.Bytes()}, nil
}

// inlineSVG is an SVG as an element of an HTML page: without the XML
// prolog and comment, and without namespace URLs (HTML knows <svg>), so
// the page names no address at all.
func inlineSVG(svg []byte) string {
	s := string(svg)
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	if end := strings.Index(s, ">"); end >= 0 {
		s = svgNamespaces.ReplaceAllString(s[:end], "") + s[end:]
	}
	return s
}

// svgNamespaces are the namespace attributes of the <svg> tag.
var svgNamespaces = regexp.MustCompile(`\s+xmlns(:\w+)?="[^"]*"`)
