package bench

import (
	"bytes"
	"errors"
	"fmt"
	"html"
	"os"
	"path/filepath"
)

// chartReportFile is the Markdown report --charts writes beside the SVGs.
const chartReportFile = "report.md"

// charted is a scenario that keeps timelines: --charts and --html work
// for it.
type charted interface {
	// chartTitle names the bench ("surge bench ticketing").
	chartTitle() string
	// chartGroups are its flows and their runs, as charted.
	chartGroups() []chartGroup
	// chartSummary is the text report, quoted as is above the charts.
	chartSummary() string
}

// chartsRequested is whether --charts or --html was given.
func (o Options) chartsRequested() bool { return o.ChartsDir != "" || o.HTMLPath != "" }

// checkCharted refuses --charts and --html before anything runs for a
// bench that keeps no timelines.
func checkCharted(o Options, s scenario) error {
	if _, ok := s.(charted); !ok && o.chartsRequested() {
		return errors.New("--charts and --html are not available for this bench (only surge bench ticketing without --crowd, commerce and jobs keep timelines)")
	}
	return nil
}

// writeChartOutputs renders c's charts and writes --charts and --html.
func writeChartOutputs(o Options, c charted) error {
	charts, err := renderCharts(c.chartGroups())
	if err != nil {
		return err
	}
	if o.ChartsDir != "" {
		if err := writeChartsDir(o.ChartsDir, c.chartTitle(), c.chartSummary(), charts); err != nil {
			return fmt.Errorf("write --charts %s: %w", o.ChartsDir, err)
		}
	}
	if o.HTMLPath != "" {
		page := chartHTML(c.chartTitle(), c.chartSummary(), charts)
		if err := os.WriteFile(o.HTMLPath, page, 0o644); err != nil {
			return fmt.Errorf("write --html: %w", err)
		}
	}
	return nil
}

// writeChartsDir writes each chart as an SVG file in dir and the Markdown
// report that shows them.
func writeChartsDir(dir, title, summary string, charts []chart) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md bytes.Buffer
	fmt.Fprintf(&md, "# %s\n\n```\n%s\n```\n", title, summary)
	for _, c := range charts {
		if err := os.WriteFile(filepath.Join(dir, c.File), c.SVG, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&md, "\n## %s\n\n![%s](%s)\n", c.Title, c.Title, c.File)
	}
	return os.WriteFile(filepath.Join(dir, chartReportFile), md.Bytes(), 0o644)
}

// chartHTML is one page that holds everything: the text report and the
// charts inline, no stylesheet, script or image fetched from anywhere.
func chartHTML(title, summary string, charts []chart) []byte {
	var b bytes.Buffer
	t := html.EscapeString(title)
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>%s</title>\n", t)
	b.WriteString("<style>body{font-family:sans-serif;max-width:60rem;margin:auto;padding:1rem}pre{background:#f4f4f4;padding:1rem;overflow-x:auto}svg{max-width:100%;height:auto}</style>\n</head>\n<body>\n")
	fmt.Fprintf(&b, "<h1>%s</h1>\n<pre>%s</pre>\n", t, html.EscapeString(summary))
	for _, c := range charts {
		fmt.Fprintf(&b, "<h2>%s</h2>\n<figure>\n%s\n</figure>\n", html.EscapeString(c.Title), inlineSVG(c.SVG))
	}
	b.WriteString("</body>\n</html>\n")
	return b.Bytes()
}
