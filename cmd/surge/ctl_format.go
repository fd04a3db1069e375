package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/surge-run/surge/internal/jqpb"
)

// ctlZone is where times are shown: the operator's own zone. Tests pin it.
var ctlZone = time.Local

// tableCellMax is how many characters of a payload or result a table
// shows: enough to recognise a job, short enough to keep a row on a line.
const tableCellMax = 40

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// row writes one tab-separated row; cells must hold no tab or newline
// (cell makes sure of it for anything a client sent).
func row(tw *tabwriter.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, c)
	}
	fmt.Fprint(tw, "\n")
}

func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil || (ts.GetSeconds() == 0 && ts.GetNanos() == 0) {
		return "-"
	}
	return ts.AsTime().In(ctlZone).Format(time.RFC3339)
}

// fmtDuration keeps three or so significant digits: 12.3ms, 1.23s, 4m5s.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func fmtTTL(secs int32) string {
	if secs == 0 {
		return "none"
	}
	return (time.Duration(secs) * time.Second).String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func fmtJobStatus(s jqpb.JobStatus) string {
	if s == jqpb.JobStatus_JOB_STATUS_UNSPECIFIED {
		return "-"
	}
	return s.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// isText says whether bytes can be shown as they are: valid UTF-8 with no
// control characters but tabs and line breaks (a NUL is valid UTF-8 but
// would garble a terminal, an escape sequence would drive it) and no
// bidirectional controls (which reorder what the terminal shows).
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if (unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r') || unicode.Is(unicode.Bidi_Control, r) {
			return false
		}
	}
	return true
}

// showBytes is a payload or result in full: as text when it is text,
// else "base64:" and its standard base64 so it can be decoded back.
func showBytes(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	if isText(b) {
		return string(b)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

// cell is a payload or result for a table: on one line (tabs and line
// breaks become spaces) and cut to tableCellMax characters.
func cell(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, showBytes(b))
	if utf8.RuneCountInString(s) <= tableCellMax {
		return s
	}
	return string([]rune(s)[:tableCellMax-1]) + "…"
}

// textCell is a free-text field (error message, reason, hostname) for a table.
func textCell(s string) string {
	if s == "" {
		return "-"
	}
	return cell([]byte(s))
}

func printSystemStatus(w io.Writer, r *jqpb.GetSystemStatusResponse) error {
	tw := newTable(w)
	row(tw, "Healthy:", yesNo(r.GetHealthy()))
	row(tw, "Active workers:", r.GetActiveWorkers())
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.GetComponents()) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		row(tw, "COMPONENT", "HEALTHY", "MESSAGE")
		for _, c := range r.GetComponents() {
			row(tw, textCell(c.GetName()), yesNo(c.GetHealthy()), textCell(c.GetMessage()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	row(tw, "QUEUE", "PENDING", "RUNNING", "FAILED", "DONE", "DEAD", "PROCESSED", "AVG DURATION", "ERROR RATE")
	for _, s := range r.GetQueueStats() {
		row(tw, textCell(s.GetQueueName()), s.GetPendingCount(), s.GetRunningCount(), s.GetFailedCount(), s.GetDoneCount(),
			s.GetDeadLetterCount(), s.GetTotalProcessed(), fmtAvgMs(s.GetAvgDurationMs()), fmtRate(s.GetErrorRate()))
	}
	return tw.Flush()
}

func fmtAvgMs(ms float64) string {
	if ms == 0 {
		return "-"
	}
	return fmtDuration(time.Duration(ms * float64(time.Millisecond)))
}

// fmtRate shows the API's error rate, a fraction of the processed jobs,
// as a percentage.
func fmtRate(f float64) string {
	return fmt.Sprintf("%.1f%%", f*100)
}

func printJob(w io.Writer, j *jqpb.Job) error {
	tw := newTable(w)
	row(tw, "Job:", j.GetJobId())
	row(tw, "Queue:", j.GetQueueName())
	row(tw, "Status:", fmtJobStatus(j.GetStatus()))
	row(tw, "Priority:", j.GetPriority())
	row(tw, "Retries:", fmt.Sprintf("%d of %d", j.GetRetryCount(), j.GetMaxRetries()))
	row(tw, "Worker:", textCell(j.GetWorkerId()))
	row(tw, "Created:", fmtTime(j.GetCreatedAt()))
	row(tw, "Not before:", fmtTime(j.GetNotBefore()))
	row(tw, "Started:", fmtTime(j.GetStartedAt()))
	row(tw, "Completed:", fmtTime(j.GetCompletedAt()))
	if j.GetStartedAt() != nil && j.GetCompletedAt() != nil {
		row(tw, "Duration:", fmtDuration(j.GetCompletedAt().AsTime().Sub(j.GetStartedAt().AsTime())))
	}
	multiline(tw, "Payload:", showBytes(j.GetPayload()))
	multiline(tw, "Result:", showBytes(j.GetResult()))
	multiline(tw, "Error:", orDash(j.GetErrorMessage()))
	return tw.Flush()
}

// multiline writes a labelled value whose later lines line up under its
// first; tabs become spaces so they cannot start a new column.
func multiline(tw *tabwriter.Writer, label, v string) {
	v = strings.TrimRight(strings.ReplaceAll(v, "\t", "    "), "\r\n")
	for i, l := range strings.Split(v, "\n") {
		if i > 0 {
			label = ""
		}
		// A worker's raw stderr may hold escape sequences: a line that is
		// not plain text is shown quoted, never sent to the terminal.
		if l = strings.TrimSuffix(l, "\r"); !isText([]byte(l)) {
			l = strconv.Quote(l)
		}
		row(tw, label, l)
	}
}

func printJobEvents(w io.Writer, events []*jqpb.JobEvent) error {
	tw := newTable(w)
	row(tw, "#", "TIME", "FROM", "TO", "WORKER", "REASON")
	for _, e := range events {
		row(tw, e.GetId(), fmtTime(e.GetOccurredAt()), fmtJobStatus(e.GetFromStatus()), fmtJobStatus(e.GetToStatus()),
			textCell(e.GetWorkerId()), textCell(e.GetReason()))
	}
	return tw.Flush()
}

func printJobList(w io.Writer, r *jqpb.ListJobsResponse) error {
	tw := newTable(w)
	row(tw, "JOB", "STATUS", "PRI", "RETRIES", "CREATED", "WORKER", "PAYLOAD")
	for _, j := range r.GetJobs() {
		row(tw, j.GetJobId(), fmtJobStatus(j.GetStatus()), j.GetPriority(), fmt.Sprintf("%d/%d", j.GetRetryCount(), j.GetMaxRetries()),
			fmtTime(j.GetCreatedAt()), textCell(j.GetWorkerId()), cell(j.GetPayload()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if t := r.GetNextPageToken(); t != "" {
		_, err := fmt.Fprintf(w, "Next page: --page-token %s\n", t)
		return err
	}
	return nil
}

func printQueues(w io.Writer, qs []*jqpb.Queue) error {
	tw := newTable(w)
	row(tw, "QUEUE", "MAX RETRIES", "TTL", "PAUSED", "CREATED")
	for _, q := range qs {
		row(tw, textCell(q.GetName()), q.GetMaxRetries(), fmtTTL(q.GetTtlSeconds()), yesNo(q.GetPaused()), fmtTime(q.GetCreatedAt()))
	}
	return tw.Flush()
}

func printQueueStats(w io.Writer, s *jqpb.QueueStats) error {
	tw := newTable(w)
	row(tw, "Queue:", textCell(s.GetQueueName()))
	row(tw, "Pending:", s.GetPendingCount())
	row(tw, "Running:", s.GetRunningCount())
	row(tw, "Failed:", s.GetFailedCount())
	row(tw, "Done:", s.GetDoneCount())
	row(tw, "Dead letters:", s.GetDeadLetterCount())
	row(tw, "Processed:", s.GetTotalProcessed())
	row(tw, "Avg duration:", fmtAvgMs(s.GetAvgDurationMs()))
	row(tw, "Error rate:", fmtRate(s.GetErrorRate()))
	return tw.Flush()
}

func printWorkers(w io.Writer, ws []*jqpb.Worker) error {
	tw := newTable(w)
	row(tw, "WORKER", "HOSTNAME", "STATUS", "CONCURRENCY", "ACTIVE", "LAST HEARTBEAT", "QUEUES")
	for _, wk := range ws {
		st := wk.GetStatus().String()
		if wk.GetStatus() == jqpb.WorkerStatus_WORKER_STATUS_UNSPECIFIED {
			st = "-"
		}
		row(tw, textCell(wk.GetWorkerId()), textCell(wk.GetHostname()), st, wk.GetConcurrency(), wk.GetActiveJobCount(),
			fmtTime(wk.GetLastHeartbeat()), textCell(strings.Join(wk.GetQueues(), ",")))
	}
	return tw.Flush()
}
