package bench

import (
	"bytes"
	"strings"
)

// The jobs bench keeps a timeline per phase and server: --charts and
// --html, a chart group per phase.

func (b *jobsBench) chartTitle() string { return "surge bench jobs" }

func (b *jobsBench) chartSummary() string {
	var buf bytes.Buffer
	for _, p := range b.rep.Phases {
		if p.Server != nil || p.Baseline != nil {
			writeJobsPhase(&buf, b.rep, p)
		}
	}
	return strings.TrimSpace(buf.String())
}

func (b *jobsBench) chartGroups() []chartGroup { return jobsChartGroups(b.rep) }

// jobsChartGroups charts each phase: the server and the do-nothing
// server. A submit phase's operation is a submit, an e2e phase's an
// executed job (latency from submit to done).
func jobsChartGroups(rep *JobsReport) []chartGroup {
	var groups []chartGroup
	for _, p := range rep.Phases {
		unit := "submitted job"
		if p.Phase == JobsPhaseE2E {
			unit = "executed job"
		}
		g := chartGroup{Name: p.Phase, File: "jobs-" + p.Phase, Unit: unit}
		if p.Server != nil {
			g.Runs = append(g.Runs, chartRun{Name: p.Server.Server, Points: p.Server.Timeline, CPUPerOpUs: p.Server.CPUPerJobUs})
		}
		if p.Baseline != nil {
			g.Runs = append(g.Runs, chartRun{Name: "do-nothing server", Points: p.Baseline.Timeline, CPUPerOpUs: p.Baseline.CPUPerJobUs})
		}
		if len(g.Runs) > 0 {
			groups = append(groups, g)
		}
	}
	return groups
}
