package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func writeSequencerHeader(out io.Writer, rep *SequencerReport) {
	c := rep.Config
	fmt.Fprintf(out, "surge bench sequencer: scenarios %s, %s messages per group, the peer's routes (POST /messages, then GET /list/sequenced/count every %.0f ms until complete, then /list/stats and /list/perfs)\n",
		strings.Join(c.Scenarios, ", "), grouped(int64(c.Messages)), c.PollMs)
	p := rep.Peer
	fmt.Fprintf(out, "the peer at best: %s messages in %.0f s, %s msg/s (%s)\n",
		grouped(int64(p.Messages)), p.Seconds, grouped(int64(p.PerSecond)), p.Setup)
}

var seqScenarioTitles = map[string]string{
	SeqScenarioPeer:   "the peer's run: one group, creationDelay 0, processingTime 0",
	SeqScenarioDelays: "one group with delays",
	SeqScenarioGroups: "groups at once, zero delays",
}

// writeSeqScenario prints one scenario.
func writeSeqScenario(out io.Writer, s *SeqScenarioReport) {
	fmt.Fprintf(out, "\n== %s: %s ==\n", s.Scenario, seqScenarioTitle(s))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(name, v string) { fmt.Fprintf(tw, "  %s\t%s\n", name, v) }
	writeSeqTimingRows(row, s)
	writeSeqOrderRow(row, s)
	if s.CPUPerMsgUs != nil {
		row("server CPU per message", fmt.Sprintf("%.2f µs (%.2f s)", *s.CPUPerMsgUs, *s.ServerCPU))
	}
	if s.PeakRSSBytes != nil {
		row("server peak RSS", mib(*s.PeakRSSBytes))
	}
	row("generator CPU", fmt.Sprintf("%.2f s, %s polls, %d failed", s.GeneratorCPU, grouped(s.Polls), s.PollErrors))
	_ = tw.Flush()
	for _, d := range s.Duplicates {
		fmt.Fprintf(out, "  COUNT PAST SENT: %s\n", d)
	}
	for _, e := range s.ErrorSamples {
		fmt.Fprintf(out, "  error sample: %s\n", e)
	}
	if len(s.Stages) > 0 {
		writeSeqStages(out, s)
	}
}

// seqScenarioTitle is the scenario's title with the delays and groups it
// ran with.
func seqScenarioTitle(s *SeqScenarioReport) string {
	title := seqScenarioTitles[s.Scenario]
	switch s.Scenario {
	case SeqScenarioDelays:
		title += fmt.Sprintf(": processingTime %d ms, creationDelay %d ms", s.ProcessingTimeMs, s.CreationDelayMs)
	case SeqScenarioGroups:
		if s.CreationDelayMs > 0 {
			title = fmt.Sprintf("groups at once, creationDelay %d ms (≤ %s msg/s offered)", s.CreationDelayMs, grouped(int64(s.Groups*1000/s.CreationDelayMs)))
		}
		title = fmt.Sprintf("%d %s (each polled every %.0f ms)", s.Groups, title, s.PollMs)
	}
	return title
}

// writeSeqTimingRows are how many messages were sequenced and how fast.
func writeSeqTimingRows(row func(name, v string), s *SeqScenarioReport) {
	row("server", serverLabel(s.Server))
	row("messages sequenced", fmt.Sprintf("%s of %s", grouped(s.Sequenced), grouped(s.Sent)))
	if s.Complete {
		row("total time (POST → count complete)", fmt.Sprintf("%.3f s", s.Seconds))
		row("rate", fmt.Sprintf("%s msg/s", grouped(int64(s.PerSecond+0.5))))
		if s.Scenario == SeqScenarioPeer && s.Sent == int64(sequencerPeer.Messages) && s.Seconds > 0 {
			row("vs the peer's best", fmt.Sprintf("%.1f× faster (%.0f s)", sequencerPeer.Seconds/s.Seconds, sequencerPeer.Seconds))
		}
	} else {
		row("total time", "INCOMPLETE")
	}
	if s.FirstGroupSeconds > 0 {
		row("first group complete", fmt.Sprintf("%.3f s", s.FirstGroupSeconds))
	}
	row("slowest POST /messages", fmt.Sprintf("%.3f s", s.PostSeconds))
	if s.ServerAverageRate != nil {
		what := "/list/perfs average rate"
		if s.Groups > 1 {
			what += " (sum over groups)"
		}
		row(what, grouped(int64(*s.ServerAverageRate+0.5))+" msg/s")
	}
}

// writeSeqOrderRow is what the server's isOrdered said.
func writeSeqOrderRow(row func(name, v string), s *SeqScenarioReport) {
	switch {
	case s.Ordered == nil:
		row("isOrdered", "not reported")
	case *s.Ordered:
		row("isOrdered", fmt.Sprintf("true (%d of %d groups checked)", len(s.PerGroup), s.Groups))
	default:
		row("isOrdered", fmt.Sprintf("FALSE in %d group(s): %s", len(s.UnorderedGroups), strings.Join(first(s.UnorderedGroups, 5), ", ")))
	}
}

// writeSeqStages prints the per-stage latency the server reported.
func writeSeqStages(out io.Writer, s *SeqScenarioReport) {
	what := "per-stage latency from /list/stats (ms)"
	if s.Groups > 1 {
		what += ", the worst group per figure"
	}
	fmt.Fprintf(out, "\n  %s\n", what)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  stage\tp50\tp90\tp95\tp99\tavg\tmin\tmax\t")
	for _, st := range seqStagesInOrder(s.Stages) {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", st.Name, ms(st.P50Ms), ms(st.P90Ms), ms(st.P95Ms), ms(st.P99Ms),
			ms(st.AvgMs), ms(st.MinMs), ms(st.MaxMs))
	}
	_ = tw.Flush()
}

func ms(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func writeSequencerGoals(out io.Writer, rep *SequencerReport) {
	if len(rep.Goals) == 0 {
		return
	}
	writeGoals(out, "goals (on this machine)", rep.Goals)
}

// seqPipeline is the order of the peer's stages, in which the table lists
// them (a message's life, then end to end); any other stage follows.
var seqPipeline = [][2]string{{"created", "processing"}, {"processing", "processed"}, {"processed", "sequencing"},
	{"sequencing", "sequenced"}, {"created", "sequenced"}}

func seqStagesInOrder(stages []SeqStage) []SeqStage {
	var out []SeqStage
	used := map[string]bool{}
	for _, p := range seqPipeline {
		if st, ok := findStage(stages, p[0], p[1]); ok && !used[st.Name] {
			used[st.Name] = true
			st.Name = p[0] + "→" + p[1]
			out = append(out, st)
		}
	}
	for _, st := range stages {
		if !used[st.Name] {
			out = append(out, st)
		}
	}
	return out
}
