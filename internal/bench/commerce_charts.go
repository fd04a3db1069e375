package bench

import (
	"bytes"
	"fmt"
	"strings"
)

// The commerce bench keeps a timeline per level and server: --charts and
// --html, a chart group per level.

func (b *commerceBench) chartTitle() string { return "surge bench commerce" }

func (b *commerceBench) chartSummary() string {
	var buf bytes.Buffer
	for _, l := range b.rep.Levels {
		if l.Server != nil {
			writeCommerceLevel(&buf, b.rep, l)
		}
	}
	return strings.TrimSpace(buf.String())
}

func (b *commerceBench) chartGroups() []chartGroup { return commerceChartGroups(b.rep) }

// commerceChartGroups charts each level: the server and the do-nothing
// server; latencies are every HTTP request's, from when its iteration was
// due.
func commerceChartGroups(rep *CommerceReport) []chartGroup {
	var groups []chartGroup
	for _, l := range rep.Levels {
		g := chartGroup{Name: grouped(int64(l.Rate)) + " it/s", File: fmt.Sprintf("level-%d", int64(l.Rate)), Unit: "iteration"}
		for _, run := range []struct {
			name string
			r    *CommerceRunReport
		}{{"", l.Server}, {"do-nothing server", l.Baseline}} {
			if run.r == nil {
				continue
			}
			name := run.name
			if name == "" {
				name = run.r.Server
			}
			g.Runs = append(g.Runs, chartRun{Name: name, Points: run.r.Timeline, CPUPerOpUs: run.r.CPUPerIterUs})
		}
		if len(g.Runs) > 0 {
			groups = append(groups, g)
		}
	}
	return groups
}
