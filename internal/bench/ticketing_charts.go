package bench

import (
	"bytes"
	"fmt"
	"strings"
)

// The ticketing bench keeps a timeline per spike: --charts and --html.

func (r *ticketingRun) chartTitle() string { return "surge bench ticketing" }

func (r *ticketingRun) chartSummary() string { return ticketingSummary(r.rep) }

func (r *ticketingRun) chartGroups() []chartGroup { return ticketingChartGroups(r.rep) }

// ticketingSummary is the text report of every flow, as printed.
func ticketingSummary(rep *Report) string {
	var b bytes.Buffer
	for _, fr := range rep.Flows {
		if fr.Server != nil {
			writeFlow(&b, rep.Config, fr)
		}
	}
	return strings.TrimSpace(b.String())
}

// ticketingChartGroups charts each flow: the server, the cluster and the
// do-nothing server, the runs that were made.
func ticketingChartGroups(rep *Report) []chartGroup {
	var groups []chartGroup
	for _, fr := range rep.Flows {
		g := chartGroup{Name: fr.Flow, File: fr.Flow, Unit: "reservation"}
		if fr.Server != nil {
			g.Runs = append(g.Runs, chartRunOf(fr.Server.Server, fr.Server))
		}
		if fr.Cluster != nil {
			g.Runs = append(g.Runs, chartRunOf(fmt.Sprintf("cluster of %d", len(fr.Cluster.Nodes)), &fr.Cluster.RunReport))
		}
		if fr.Baseline != nil {
			g.Runs = append(g.Runs, chartRunOf("do-nothing server", fr.Baseline))
		}
		if len(g.Runs) > 0 {
			groups = append(groups, g)
		}
	}
	return groups
}

func chartRunOf(name string, run *RunReport) chartRun {
	c := chartRun{Name: name, Points: run.Timeline}
	if run.ServerCPUSeconds != nil && run.Reservations > 0 {
		us := *run.ServerCPUSeconds * 1e6 / float64(run.Reservations)
		c.CPUPerOpUs = &us
	}
	return c
}
