package bench

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The receiver takes what the OTLP/HTTP exporter sends, plain and
// gzipped, and counts every span; a body that is not an export is
// answered 400 and counted as bad.
func TestOTLPReceiverCountsTheExportersSpans(t *testing.T) {
	rc, err := startOTLPReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.close()
	ctx := context.Background()
	for _, c := range []otlptracehttp.Compression{otlptracehttp.NoCompression, otlptracehttp.GzipCompression} {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(rc.endpoint+"/v1/traces"), otlptracehttp.WithCompression(c))
		if err != nil {
			t.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		for range 5 {
			_, span := tp.Tracer("test").Start(ctx, "op")
			span.End()
		}
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatalf("compression %v: %v", c, err)
		}
	}
	if got := rc.counts(); got.spans != 10 || got.requests < 2 || got.bad != 0 {
		t.Fatalf("receiver counted %+v, want 10 spans in at least 2 exports, none bad", got)
	}
	resp, err := http.Post(rc.endpoint+"/v1/traces", "application/x-protobuf", strings.NewReader("\xff\xff not protobuf"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || rc.counts().bad != 1 || rc.counts().spans != 10 {
		t.Fatalf("bad export: %s %q, counts %+v; want 400, one bad, spans unchanged", resp.Status, b, rc.counts())
	}
}

// Every setting runs first in some round of three pairs; each pair of
// rounds is mirrored; and over an even number of rounds every setting
// has the same mean position.
func TestTraceOrderTurnsAndBalances(t *testing.T) {
	firsts := map[int]bool{}
	pos := make([]int, 3)
	for i := range 6 {
		o := traceOrder(i, 3)
		if s := slices.Sorted(slices.Values(o)); !slices.Equal(s, []int{0, 1, 2}) {
			t.Fatalf("round %d: order %v is not each setting once", i, o)
		}
		firsts[o[0]] = true
		for p, k := range o {
			pos[k] += p
		}
		prev := traceOrder(i-1, 3)
		slices.Reverse(prev)
		if i%2 == 1 && !slices.Equal(o, prev) {
			t.Errorf("round %d %v does not mirror round %d", i, o, i-1)
		}
		if i%2 == 1 && (pos[0] != pos[1] || pos[1] != pos[2]) {
			t.Errorf("after %d rounds the settings' positions add up to %v, want equal", i+1, pos)
		}
	}
	if len(firsts) != 3 {
		t.Errorf("settings run first: %v, want all three", firsts)
	}
}

// traceRuns are two rounds of the three settings, in traceOrder, the 1 %
// round 2 not measured.
func traceRuns() *TraceCostReport {
	cpu := map[string][]*float64{"off": {f64(60), f64(70)}, "1 %": {f64(63), nil}, "100 %": {f64(90), f64(98)}}
	spans := map[string]int64{"off": 0, "1 %": 40, "100 %": 9000}
	settings := traceSettings(0.01)
	t := &TraceCostReport{SampleRatio: 0.01, Rounds: 2, Protocol: traceProtocol}
	for round := range 2 {
		for _, k := range traceOrder(round, 3) {
			s := settings[k].name
			t.Runs = append(t.Runs, &TraceCostRun{Round: round + 1, Setting: s, Reservations: 1000, CPUPerReservationUs: cpu[s][round],
				SpansReceived: spans[s], ExportRequests: spans[s] / 20})
		}
	}
	t.summarise(settings)
	return t
}

// The summary: each setting's spread over the rounds it was measured in,
// the ratio of means to off, each round's own ratio and their median; the
// goals judge the median of the rounds' ratios.
func TestTraceCostSummary(t *testing.T) {
	rep := traceRuns()
	off, one, all := rep.Settings[0], rep.Settings[1], rep.Settings[2]
	near := func(what string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got < want-1e-9 || *got > want+1e-9 {
			t.Errorf("%s = %v, want %v", what, ptrString(got), want)
		}
	}
	near("off mean", off.MeanUs, 65)
	near("off median", off.MedianUs, 65)
	near("off sd", off.SDUs, 7.0710678118654755)
	near("off min", off.MinUs, 60)
	near("off max", off.MaxUs, 70)
	near("1 % mean", one.MeanUs, 63)
	near("1 % sd", one.SDUs, 0)
	near("1 % ratio of means", one.RatioOfMeans, 63.0/65)
	near("1 % median of rounds", one.MedianRoundRatio, 1.05)
	near("100 % median of rounds", all.MedianRoundRatio, (1.5+1.4)/2)
	if off.RatioOfMeans != nil || off.MedianRoundRatio != nil || len(off.RoundRatios) != 0 {
		t.Errorf("off compared with itself: %+v", off)
	}
	if one.RoundRatios[1] != nil || one.CPUPerReservationUs[1] != nil {
		t.Errorf("1 %% round 2 was not measured, yet has %v", ptrString(one.RoundRatios[1]))
	}
	if off.SpansReceived != 0 || one.SpansReceived != 80 || all.SpansReceived != 18000 || all.ExportRequests != 900 {
		t.Errorf("spans %d, %d, %d (%d exports), want 0, 80, 18000 (900)", off.SpansReceived, one.SpansReceived, all.SpansReceived, all.ExportRequests)
	}
	goals := rep.goals()
	if len(goals) != 2 || goals[0].Met == nil || !*goals[0].Met || goals[1].Met == nil || goals[1].Target != "stated" {
		t.Fatalf("goals %+v: want 1 %% met at 1.05× (median of rounds), 100 %% stated", goals)
	}
	if p := rep.problems("compat", nil); len(p) != 0 {
		t.Errorf("problems %v, want none", p)
	}
}

func ptrString(v *float64) string {
	if v == nil {
		return "nil"
	}
	return strconv.FormatFloat(*v, 'g', -1, 64)
}

// Spans while off, none while on, and exports the receiver could not
// decode are each a problem that names them.
func TestTraceCostProblems(t *testing.T) {
	rep := traceRuns()
	rep.Settings[0].SpansReceived = 7
	rep.Settings[1].SpansReceived = 0
	rep.Settings[2].BadExports = 3
	got := strings.Join(rep.problems("native", "decoding the export: eof"), "\n")
	for _, want := range []string{"native tracing off: the receiver got 7 spans", "native tracing 1 %: the receiver got no span in 2 round(s)",
		"could not decode 3 of 904 exports (last: decoding the export: eof)"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems:\n%s\nwant %q", got, want)
		}
	}
}

// --trace-cost is refused where it cannot measure, by the flag at fault.
func TestTraceCostIsValidated(t *testing.T) {
	ok := TicketingOptions{TraceCost: true, TraceCostRatio: 0.01, TraceCostRounds: 4, ServeArgs: []string{"--max-inflight=9"}}
	if err := ok.checkTraceCost(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		change func(o *TicketingOptions)
		want   string
	}{
		{func(o *TicketingOptions) { o.Crowd = true }, "--crowd"},
		{func(o *TicketingOptions) { o.Target = "http://127.0.0.1:1" }, "--target"},
		{func(o *TicketingOptions) { o.TraceCostRatio = 0 }, "--trace-cost-ratio 0"},
		{func(o *TicketingOptions) { o.TraceCostRatio = 1 }, "--trace-cost-ratio 1"},
		{func(o *TicketingOptions) { o.TraceCostRounds = 0 }, "--trace-cost-rounds 0"},
		{func(o *TicketingOptions) { o.ServeArgs = append(o.ServeArgs, "--otel=false") }, "--serve-flag=--otel=false"},
		{func(o *TicketingOptions) { o.ServeArgs = append(o.ServeArgs, "--trace-sample-ratio=1") }, "--serve-flag=--trace-sample-ratio=1"},
	} {
		o := ok
		o.ServeArgs = slices.Clone(ok.ServeArgs)
		c.change(&o)
		if err := o.checkTraceCost(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one naming %s", err, c.want)
		}
	}
}

// The servers run without the caller's OTEL_* variables (an endpoint
// there would trace the off server); a traced one gets --otel, its ratio
// and the receiver, after the --serve-flag flags.
func TestTraceServeEnvAndFlags(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("SURGE_OTEL", "true")
	serve := []string{"--max-inflight=9"}
	env, args := traceServe("http://127.0.0.1:4318", traceSetting{"off", traceOff}, serve)
	for _, kv := range env {
		if strings.HasPrefix(kv, "OTEL_") || strings.HasPrefix(kv, "SURGE_") {
			t.Errorf("off server's environment has %s", kv)
		}
	}
	if !slices.Equal(args, serve) {
		t.Errorf("off server's flags %v, want %v", args, serve)
	}
	env, args = traceServe("http://127.0.0.1:4318", traceSetting{"1 %", 0.01}, serve)
	var otel []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "OTEL_") || strings.HasPrefix(kv, "SURGE_") {
			otel = append(otel, kv)
		}
	}
	want := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"}
	if !slices.Equal(otel, want) {
		t.Errorf("traced server's OTEL_* %v, want %v", otel, want)
	}
	if w := []string{"--max-inflight=9", "--otel", "--trace-sample-ratio", "0.01"}; !slices.Equal(args, w) {
		t.Errorf("traced server's flags %v, want %v", args, w)
	}
}

// The flow's report with tracing's cost: its table, the rounds in the
// order they ran, the two goals; then at another ratio, with a round
// that measured nothing.
func TestTraceCostReportGolden(t *testing.T) {
	server := &RunReport{Server: "surge", Stats: Stats{Reservations: 40_000, Successes: 4000, Failures: 36_000, Seconds: 3, PerSecond: 13_333,
		P50Us: 9000, P95Us: 20_000, P99Us: 30_000, MaxUs: 40_000, SeatsSold: 16_000, SeatsOffered: 16_000, GeneratorCPUSeconds: 2, DoubleBookings: []DoubleBooking{}}}
	server.setCPU(2.6)
	f := &FlowReport{Flow: FlowCompat, Server: server, TraceCost: traceRuns()}
	f.judge(256)
	cfg := ReportConfig{Areas: 10, Reservations: 40_000, Clients: 4, Groups: 1, Inflight: 256, HTTP2: true, Flow: FlowCompat, Seed: 1}
	checkGolden(t, "flow-trace-cost", func(w io.Writer) { writeFlow(w, cfg, f) })

	tc := &TraceCostReport{SampleRatio: 0.001, Rounds: 1, Protocol: traceProtocol,
		Runs: []*TraceCostRun{{Round: 1, Setting: "off"}, {Round: 1, Setting: "0.1 %", SpansReceived: 3}, {Round: 1, Setting: "100 %", SpansReceived: 900}}}
	tc.summarise(traceSettings(0.001))
	g := &FlowReport{Flow: FlowNative, Server: server, TraceCost: tc}
	g.judge(256)
	checkGolden(t, "flow-trace-cost-unmeasured", func(w io.Writer) { writeFlow(w, cfg, g) })
}

// A traced run that sent no span is a problem once it sampled enough
// requests for that to be more than luck; an untraced one never is.
func TestTraceCostRunWithoutSpans(t *testing.T) {
	on, off := traceSetting{"1 %", 0.01}, traceSetting{"off", traceOff}
	for _, c := range []struct {
		flow         string
		reservations int64
		spans        int64
		s            traceSetting
		want         string
	}{
		{FlowCompat, 40_000, 0, on, "about 800 requests were sampled"},
		{FlowNative, 40_000, 0, on, "about 400 requests were sampled"},
		{FlowNative, 40_000, 12, on, ""},
		{FlowNative, 1000, 0, on, ""}, // about 10 sampled: none is luck
		{FlowCompat, 40_000, 0, off, ""},
	} {
		run := &TraceCostRun{Reservations: c.reservations, SpansReceived: c.spans}
		got := run.unexported(c.flow, c.s)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s %d reservations, %d spans, %s: %q, want %q", c.flow, c.reservations, c.spans, c.s.name, got, c.want)
		}
	}
}

// A caller whose every variable is filtered out gives the child an empty
// environment, not nil, which exec.Cmd takes for the caller's whole one.
func TestWithoutPrefixIsNeverNil(t *testing.T) {
	if env := withoutPrefix([]string{"SURGE_KAFKA=x", "SURGE_OTEL=true"}, "SURGE_"); env == nil || len(env) != 0 {
		t.Errorf("withoutPrefix = %#v, want an empty, non-nil environment", env)
	}
}
