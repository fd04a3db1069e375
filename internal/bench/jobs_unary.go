package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/surge-run/surge/internal/jqpb"
)

// JobsPhaseUnary is the peer's own measurement as ghz makes it: a grpc-go
// client, --concurrency callers sharing --connections connections, a
// fixed --total of unary SubmitJob calls and no workers, against Surge's
// grpc-go listener (--grpc-addr) and its connect one (--addr), and
// against two do-nothing servers: grpc-go's own transport and connect-go
// on net/http, the stack Surge served gRPC with before.
const JobsPhaseUnary = "unary"

// The unary phase's goals (issue 24), judged against the do-nothing
// grpc-go server in the same run.
const (
	unaryGoalRatePercent = 80
	unaryGoalCPUMultiple = 1.25
	unaryGoalP99Ms       = 50
)

// The unary phase's runs, in the order they run and are printed.
const (
	unaryNullGRPC    = "do-nothing grpc-go"
	unaryNullConnect = "do-nothing connect"
	unarySurgeGRPC   = "surge --grpc-addr"
	unarySurgeAddr   = "surge --addr"
)

// UnaryRun is one server's run in the unary phase.
type UnaryRun struct {
	Server string `json:"server"`
	// Round counts from 1 (--rounds); the first runs every server.
	Round        int           `json:"round"`
	OK           int64         `json:"ok"`
	Errors       int64         `json:"errors"`
	ErrorsBy     []string      `json:"errorSamples,omitempty"`
	Seconds      float64       `json:"seconds"`
	Rate         float64       `json:"submitPerSecond"`
	Call         LatencyReport `json:"submitCall"`
	CPUSeconds   *float64      `json:"serverCpuSeconds,omitempty"`
	CPUPerCall   *float64      `json:"serverCpuPerSubmitUs,omitempty"`
	PeakRSS      *int64        `json:"serverPeakRssBytes,omitempty"`
	GeneratorCPU float64       `json:"generatorCpuSeconds"`
}

// runUnaryPhase runs the ghz-like load against each server in turn: the
// do-nothing ones (unless --baseline=false), then a fresh `surge serve`
// with --grpc-addr, measured on that listener and then on --addr.
func runUnaryPhase(ctx context.Context, o JobsOptions, rig *Rig, p *JobsPhase) error {
	if o.Baseline {
		for _, which := range []string{unaryNullGRPC, unaryNullConnect} {
			if err := unaryAgainstNull(ctx, o, rig, p, which, 1); err != nil {
				return err
			}
		}
	}
	for _, name := range []string{unarySurgeGRPC, unarySurgeAddr} {
		if o.Target != "" && name == unarySurgeGRPC {
			continue // a running server: the one address --target names, its --addr
		}
		if err := unaryAgainstSurge(ctx, o, rig, p, name, 1); err != nil {
			return err
		}
	}
	for round := 2; round <= o.Rounds; round++ {
		if err := unaryRound(ctx, o, rig, p, round); err != nil {
			return err
		}
	}
	return nil
}

// unaryRound runs the two servers the goals compare once more, Surge
// first in even rounds, so that over the rounds neither always runs
// while the host is in the same mood.
func unaryRound(ctx context.Context, o JobsOptions, rig *Rig, p *JobsPhase, round int) error {
	null := func() error { return unaryAgainstNull(ctx, o, rig, p, unaryNullGRPC, round) }
	surge := func() error { return unaryAgainstSurge(ctx, o, rig, p, unarySurgeGRPC, round) }
	if round%2 == 0 {
		null, surge = surge, null
	}
	if err := null(); err != nil {
		return err
	}
	return surge()
}

// unaryAgainstSurge loads a fresh `surge serve` (its queue empty: a queue
// holds at most 100,000 unfinished jobs) on one of its listeners, and
// adds the run to p as round's.
func unaryAgainstSurge(ctx context.Context, o JobsOptions, rig *Rig, p *JobsPhase, name string, round int) error {
	grpcAddr, err := freeAddr()
	if err != nil {
		return err
	}
	dir, userDir := "data-unary-"+strings.Fields(name)[1][2:], "jobs-unary"
	if round > 1 {
		dir, userDir = fmt.Sprintf("%s-r%d", dir, round), fmt.Sprintf("%s-r%d", userDir, round)
	}
	srv, err := rig.target(ctx, "unary", "surge-jobs-unary", dir, userDir, "--grpc-addr", grpcAddr)
	if err != nil {
		return err
	}
	addr := strings.TrimPrefix(srv.base, "http://")
	if name == unarySurgeGRPC {
		addr = grpcAddr
	}
	run, err := unaryLoad(ctx, o, name, addr, srv.cpu(ctx), rig)
	if run != nil {
		run.PeakRSS, run.Round = srv.peakRSS(), round
		p.Unary = append(p.Unary, run)
	}
	if err != nil {
		return err
	}
	return srv.stop()
}

// unaryAgainstNull loads a fresh do-nothing server on one of its
// listeners, and adds the run to p as round's.
func unaryAgainstNull(ctx context.Context, o JobsOptions, rig *Rig, p *JobsPhase, which string, round int) error {
	grpcAddr, err := freeAddr()
	if err != nil {
		return err
	}
	null, err := rig.startNull(ctx, "unary", "null-jobs-unary", "--grpc-addr", grpcAddr)
	if err != nil {
		return err
	}
	defer rig.stopNull(null)
	addr := grpcAddr
	if which == unaryNullConnect {
		addr = null.addr
	}
	run, err := unaryLoad(ctx, o, which, addr, null.cpuSeconds, rig)
	if run != nil {
		run.PeakRSS, run.Round = peakOf(null), round
		p.Unary = append(p.Unary, run)
	}
	return err
}

// unaryLoad makes --total SubmitJob calls from --concurrency callers over
// --connections grpc-go connections to addr, and measures the server's
// CPU over them.
func unaryLoad(ctx context.Context, o JobsOptions, name, addr string, cpu func() (float64, error), rig *Rig) (*UnaryRun, error) {
	rig.logf("unary: %s SubmitJob calls from %d callers on %d connection(s) to %s (%s)", grouped(int64(o.Total)), o.Concurrency, o.Connections, addr, name)
	clients, closeAll, err := unaryClients(ctx, addr, o.Connections)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer closeAll()
	run := &UnaryRun{Server: name}
	cpu0, cerr := cpu()
	gen0 := selfCPUSeconds()
	hist := newShardedHist()
	var left atomic.Int64
	left.Store(int64(o.Total))
	var errs codeCounts
	var samples sync.Map
	start := time.Now()
	var wg sync.WaitGroup
	for i := range o.Concurrency {
		c := clients[i%len(clients)]
		wg.Go(func() {
			msg := &jqpb.SubmitJobRequest{QueueName: jobsQueue, Payload: jobsPayload}
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				t0 := time.Now()
				if _, err := c.SubmitJob(ctx, msg); err != nil {
					code := errs.add(connect.NewError(connect.Code(status.Code(err)), err))
					samples.LoadOrStore(code, err.Error())
					continue
				}
				hist.record(i, time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	run.Seconds = elapsed.Seconds()
	run.Call = hist.latency()
	run.OK = run.Call.Count
	for _, n := range errs.byName() {
		run.Errors += n
	}
	samples.Range(func(_, v any) bool { run.ErrorsBy = append(run.ErrorsBy, v.(string)); return true })
	run.Rate = float64(run.OK) / run.Seconds
	run.GeneratorCPU = selfCPUSeconds() - gen0
	if cpu1, err := cpu(); err == nil && cerr == nil {
		used := cpu1 - cpu0
		run.CPUSeconds = &used
		if run.OK > 0 {
			per := used / float64(run.OK) * 1e6
			run.CPUPerCall = &per
		}
	}
	return run, ctx.Err()
}

// unaryClients are n grpc-go connections to addr, each connected before
// the clock starts, as ghz connects before it calls.
func unaryClients(ctx context.Context, addr string, n int) ([]jqpb.JobServiceClient, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	var cs []jqpb.JobServiceClient
	for range n {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, conn)
		if err := waitReady(ctx, conn); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("connect to %s: %w", addr, err)
		}
		cs = append(cs, jqpb.NewJobServiceClient(conn))
	}
	return cs, closeAll, nil
}

// unaryConnectTimeout bounds the wait for a connection to be ready.
const unaryConnectTimeout = 10 * time.Second

func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, unaryConnectTimeout)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			return errors.New("not ready within " + unaryConnectTimeout.String())
		}
	}
	return nil
}

// unaryCompared is one round's comparison of Surge's grpc-go listener
// with the do-nothing grpc-go server; nil where a run is missing.
type unaryCompared struct {
	round          int
	pct, cpux, p99 *float64
}

// unaryRounds compares the runs of each round.
func (p *JobsPhase) unaryRounds() []unaryCompared {
	var out []unaryCompared
	for round := 1; ; round++ {
		var s, b *UnaryRun
		for _, r := range p.Unary {
			switch {
			case r.Round != round:
			case r.Server == unarySurgeGRPC:
				s = r
			case r.Server == unaryNullGRPC:
				b = r
			}
		}
		if s == nil && b == nil {
			return out
		}
		c := unaryCompared{round: round}
		if s != nil && b != nil && b.Rate > 0 {
			c.pct = new(100 * s.Rate / b.Rate)
		}
		if s != nil && b != nil && s.CPUPerCall != nil && b.CPUPerCall != nil && *b.CPUPerCall > 0 {
			c.cpux = new(*s.CPUPerCall / *b.CPUPerCall)
		}
		if s != nil && s.Call.Count > 0 {
			c.p99 = new(float64(s.Call.P99Us) / 1e3)
		}
		out = append(out, c)
	}
}

// judgeUnary sets the goals: Surge's grpc-go listener against the
// do-nothing grpc-go server, each round on its own; with more than one
// round, the median of the rounds' figures.
func (p *JobsPhase) judgeUnary() {
	p.Goals = nil
	rounds := p.unaryRounds()
	if len(rounds) == 0 {
		return
	}
	var pcts, cpuxs, p99s []float64
	for _, c := range rounds {
		for _, f := range []struct {
			v  *float64
			to *[]float64
		}{{c.pct, &pcts}, {c.cpux, &cpuxs}, {c.p99, &p99s}} {
			if f.v != nil {
				*f.to = append(*f.to, *f.v)
			}
		}
	}
	note := ""
	if len(rounds) > 1 {
		note = fmt.Sprintf("median of %d rounds", len(rounds))
	}
	p.Goals = append(p.Goals,
		goal("submit rate, % of do-nothing grpc-go's", "≥ 80 %", "%", medianOf(pcts), func(v float64) bool { return v >= unaryGoalRatePercent }, note),
		goal("server CPU per submit ÷ do-nothing grpc-go's", "≤ 1.25×", "×", medianOf(cpuxs), func(v float64) bool { return v <= unaryGoalCPUMultiple }, note),
		goal("submit call p99 (ms)", "< 50 ms", "ms", medianOf(p99s), func(v float64) bool { return v < unaryGoalP99Ms }, note))
}

// medianOf is the median of xs, nil for none.
func medianOf(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	return new(median(xs))
}

func writeUnaryPhase(out io.Writer, c JobsConfig, p *JobsPhase) {
	fmt.Fprintf(out, "\njobs unary (ghz-like): %s SubmitJob calls from %d callers over %d grpc-go connection(s), no workers\n",
		grouped(int64(c.Total)), c.Concurrency, c.Connections)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  server\tOK\terrors\trate\tp50 / p95 / p99 / max\tserver CPU per submit\tpeak RSS")
	for _, r := range p.Unary {
		name := r.Server
		if r.Round > 1 {
			name = fmt.Sprintf("%s, round %d", r.Server, r.Round)
		}
		cpu, rss := "-", "-"
		if r.CPUPerCall != nil {
			cpu = fmt.Sprintf("%.1f µs (%.2f s)", *r.CPUPerCall, *r.CPUSeconds)
		}
		if r.PeakRSS != nil {
			rss = fmt.Sprintf("%d MiB", *r.PeakRSS>>20)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s/s\t%s\t%s\t%s\n", name, grouped(r.OK), grouped(r.Errors), grouped(int64(r.Rate)), latencyCell(r.Call), cpu, rss)
	}
	tw.Flush()
	for _, r := range p.Unary {
		for _, e := range r.ErrorsBy {
			fmt.Fprintf(out, "  %s: %s\n", r.Server, e)
		}
	}
	if rounds := p.unaryRounds(); len(rounds) > 1 {
		fmt.Fprintf(out, "\n  surge --grpc-addr against do-nothing grpc-go, round by round:\n")
		cell := func(v *float64, format string) string {
			if v == nil {
				return "n/a"
			}
			return fmt.Sprintf(format, *v)
		}
		for _, c := range rounds {
			fmt.Fprintf(out, "  round %d: rate %s, server CPU per submit %s, p99 %s\n", c.round,
				cell(c.pct, "%.1f %%"), cell(c.cpux, "%.2f×"), cell(c.p99, "%.2f ms"))
		}
	}
	writeGoals(out, "goals (against the do-nothing grpc-go server)", p.Goals)
}

// ServeNullGRPC serves the do-nothing JobService on grpc-go's own
// transport on addr until ctx is done: the ceiling of the unary phase.
func ServeNullGRPC(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s := grpc.NewServer()
	n := newNullJobs()
	jqpb.RegisterJobServiceServer(s, &nullGRPCJobs{n: n})
	jqpb.RegisterWorkerServiceServer(s, &nullGRPCWorkers{n: n})
	go func() {
		<-ctx.Done()
		s.GracefulStop()
	}()
	return s.Serve(ln)
}

// nullGRPCJobs answers SubmitJob with a job id of the real shape and
// does nothing else.
type nullGRPCJobs struct {
	jqpb.UnimplementedJobServiceServer
	n *nullJobs
}

// With no worker registered (the unary phase) a submit only draws an id.
func (g *nullGRPCJobs) SubmitJob(ctx context.Context, req *jqpb.SubmitJobRequest) (*jqpb.SubmitJobResponse, error) {
	id, err := g.n.submit(ctx, req)
	if err != nil {
		return nil, grpcStatus(err)
	}
	return &jqpb.SubmitJobResponse{JobId: id}, nil
}

func (g *nullGRPCJobs) SubmitJobs(ctx context.Context, req *jqpb.SubmitJobsRequest) (*jqpb.SubmitJobsResponse, error) {
	r, err := g.n.SubmitJobs(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, grpcStatus(err)
	}
	return r.Msg, nil
}

// nullGRPCWorkers is the do-nothing WorkerService on grpc-go: the same
// jobs as nullGRPCJobs, handed to worker streams as the connect one does
// (the e2e phase's baseline with --grpc).
type nullGRPCWorkers struct {
	jqpb.UnimplementedWorkerServiceServer
	n *nullJobs
}

// grpcStatus gives a connect error its grpc-go status.
func grpcStatus(err error) error {
	return status.Error(codes.Code(connect.CodeOf(err)), err.Error())
}

func (g *nullGRPCWorkers) RegisterWorker(ctx context.Context, req *jqpb.RegisterWorkerRequest) (*jqpb.RegisterWorkerResponse, error) {
	r, err := g.n.RegisterWorker(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, grpcStatus(err)
	}
	return r.Msg, nil
}

func (g *nullGRPCWorkers) StreamJobs(req *jqpb.StreamJobsRequest, s grpc.ServerStreamingServer[jqpb.JobAssignment]) error {
	if err := g.n.streamTo(s.Context(), req.WorkerId, s.Send); err != nil {
		return grpcStatus(err)
	}
	return nil
}

func (g *nullGRPCWorkers) ReportResult(ctx context.Context, req *jqpb.ReportResultRequest) (*jqpb.ReportResultResponse, error) {
	if _, err := g.n.ReportResult(ctx, connect.NewRequest(req)); err != nil {
		return nil, grpcStatus(err)
	}
	return &jqpb.ReportResultResponse{}, nil
}

func (g *nullGRPCWorkers) AckJob(context.Context, *jqpb.AckJobRequest) (*jqpb.AckJobResponse, error) {
	return &jqpb.AckJobResponse{}, nil
}

func (g *nullGRPCWorkers) Heartbeat(context.Context, *jqpb.HeartbeatRequest) (*jqpb.HeartbeatResponse, error) {
	return &jqpb.HeartbeatResponse{}, nil
}

func (g *nullGRPCWorkers) Deregister(ctx context.Context, req *jqpb.DeregisterRequest) (*jqpb.DeregisterResponse, error) {
	_, _ = g.n.Deregister(ctx, connect.NewRequest(req))
	return &jqpb.DeregisterResponse{}, nil
}
