package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Scenarios of `surge bench sequencer --scenario`.
const (
	SeqScenarioPeer   = "peer"   // the peer's run: one group, zero delays
	SeqScenarioDelays = "delays" // one group with processing (and creation) delays
	SeqScenarioGroups = "groups" // --groups groups at once
)

// seqGroupsPollFloor is the slowest the groups scenario polls each group.
// 64 groups polled every 10 ms would be 6,400 requests/s of polling, load
// on the server whose CPU per message the run measures; its total time is
// seconds long, so 50 ms of resolution costs it little.
const seqGroupsPollFloor = 50 * time.Millisecond

// SequencerOptions are the flags of `surge bench sequencer`.
type SequencerOptions struct {
	Scenarios      string
	Messages       int // per group
	Groups         int
	ProcessingTime int // ms, delays scenario
	CreationDelay  int // ms, delays scenario
	// GroupsDelay is the groups scenario's creationDelay: 0 for its
	// throughput run; > 0 paces it, for the latency goal stated at half
	// the throughput goal. It offers at most groups × 1000 / delay msg/s:
	// the server publishes a paced message at a time and waits for it to
	// be durable before the delay, so it reaches less (100 groups at 1 ms
	// gave 44,000 msg/s on the 2-core machine).
	GroupsDelay int
	Poll        time.Duration
	Timeout     time.Duration // per scenario, POST to the last count

	Options
}

func (o SequencerOptions) scenarios() ([]string, error) {
	var out []string
	for _, s := range strings.Split(o.Scenarios, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case SeqScenarioPeer, SeqScenarioDelays, SeqScenarioGroups:
		default:
			return nil, fmt.Errorf("--scenario %q: want a list of peer, delays, groups", o.Scenarios)
		}
		for _, x := range out {
			if x == s {
				return nil, fmt.Errorf("--scenario %q names %s twice", o.Scenarios, s)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

func (o SequencerOptions) validate() error {
	if _, err := o.scenarios(); err != nil {
		return err
	}
	switch {
	case o.Messages < 1:
		return errors.New("--messages must be at least 1")
	case o.Groups < 1 || o.Groups > 10_000:
		return fmt.Errorf("--groups %d: want 1..10000", o.Groups)
	case o.ProcessingTime < 0 || o.CreationDelay < 0 || o.GroupsDelay < 0:
		return errors.New("--processing-time, --creation-delay and --groups-creation-delay must not be negative")
	case o.Poll <= 0 || o.Poll > 10*time.Second:
		return errors.New("--poll must be in (0, 10s]")
	case o.Timeout <= 0:
		return errors.New("--timeout must be positive")
	}
	if o.Target != "" && !strings.HasPrefix(o.Target, "http://") && !strings.HasPrefix(o.Target, "https://") {
		return fmt.Errorf("--target %q: want http://host:port", o.Target)
	}
	return nil
}

// seqCreate is the body of the peer's POST /messages.
type seqCreate struct {
	Name             string `json:"name"`
	NumberOfMessages int    `json:"numberOfMessages"`
	CreationDelay    int    `json:"creationDelay"`
	ProcessingTime   int    `json:"processingTime"`
}

// seqGroup is one group of a scenario and what the bench saw of it.
type seqGroup struct {
	name   string
	sent   int64
	count  atomic.Int64 // last polled sequenced count
	doneNs atomic.Int64 // since the scenario's start; 0 until complete
	posted atomic.Bool  // POST /messages answered 2xx
	over   atomic.Int64 // highest count above sent, if any (a duplicate)
	rep    *SeqGroupReport
}

// seqRun is one scenario against one server.
type seqRun struct {
	o        SequencerOptions
	scenario string
	label    string
	base     string
	hc       *http.Client
	groups   []*seqGroup
	poll     time.Duration
	start    time.Time

	polls, pollErrors atomic.Int64
	mu                sync.Mutex
	samples           []string
}

func newSeqRun(o SequencerOptions, scenario, base string) *seqRun {
	r := &seqRun{o: o, scenario: scenario, label: scenario, base: strings.TrimRight(base, "/"), poll: o.Poll,
		// No client timeout: a POST /messages with a creationDelay may
		// take as long as its messages take to create (the server may
		// answer only then); each call is bounded by its context instead.
		hc: &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			DisableCompression:  true,
		}}}
	n := 1
	if scenario == SeqScenarioGroups {
		n = o.Groups
		r.poll = max(o.Poll, seqGroupsPollFloor)
	}
	for i := range n {
		name := "bench-" + scenario
		if scenario == SeqScenarioGroups {
			name = fmt.Sprintf("bench-groups-%03d", i)
		}
		r.groups = append(r.groups, &seqGroup{name: name, sent: int64(o.Messages)})
	}
	return r
}

func (r *seqRun) create(name string) seqCreate {
	c := seqCreate{Name: name, NumberOfMessages: r.o.Messages}
	switch r.scenario {
	case SeqScenarioDelays:
		c.CreationDelay, c.ProcessingTime = r.o.CreationDelay, r.o.ProcessingTime
	case SeqScenarioGroups:
		c.CreationDelay = r.o.GroupsDelay
	}
	return c
}

func (r *seqRun) sample(what string, err error) {
	r.mu.Lock()
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, what+": "+err.Error())
	}
	r.mu.Unlock()
}

// callTimeout bounds every call but POST /messages (bounded by --timeout).
const callTimeout = 30 * time.Second

// do sends one request and reads the whole answer.
func (r *seqRun) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	t := callTimeout
	if method == http.MethodPost {
		t = r.o.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, b, err
}

func q(name string) string { return "?name=" + url.QueryEscape(name) }

// reset deletes the scenario's groups, so a rerun against --target starts
// from nothing; a group that does not exist yet is fine.
func (r *seqRun) reset(ctx context.Context) error {
	return r.each(ctx, 8, func(g *seqGroup) error {
		code, b, err := r.do(ctx, http.MethodDelete, "/messages"+q(g.name), nil)
		if err != nil {
			return fmt.Errorf("DELETE /messages%s: %w", q(g.name), err)
		}
		if code/100 != 2 && code != http.StatusNotFound {
			return fmt.Errorf("DELETE /messages%s: %d %s", q(g.name), code, clip(b))
		}
		return nil
	})
}

// each runs f over the groups on at most n goroutines; the first error wins.
func (r *seqRun) each(ctx context.Context, n int, f func(g *seqGroup) error) error {
	work := make(chan *seqGroup)
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(n, len(r.groups)) {
		wg.Go(func() {
			for g := range work {
				if err := f(g); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for _, g := range r.groups {
		if ctx.Err() != nil {
			break
		}
		work <- g
	}
	close(work)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// post creates every group's messages at once, one POST each.
func (r *seqRun) post(ctx context.Context) (time.Duration, error) {
	var slowest atomic.Int64
	err := r.each(ctx, len(r.groups), func(g *seqGroup) error {
		t0 := time.Now()
		code, b, err := r.do(ctx, http.MethodPost, "/messages", r.create(g.name))
		if err != nil {
			return fmt.Errorf("POST /messages %s: %w", g.name, err)
		}
		if code/100 != 2 {
			return fmt.Errorf("POST /messages %s: %d %s", g.name, code, clip(b))
		}
		g.posted.Store(true)
		d := int64(time.Since(t0))
		for {
			cur := slowest.Load()
			if d <= cur || slowest.CompareAndSwap(cur, d) {
				break
			}
		}
		return nil
	})
	return time.Duration(slowest.Load()), err
}

// count polls one group once. Before its POST has been answered the group
// may not exist yet, so an error then is not counted against the server.
func (r *seqRun) count(ctx context.Context, g *seqGroup) {
	posted := g.posted.Load()
	code, b, err := r.do(ctx, http.MethodGet, "/list/sequenced/count"+q(g.name), nil)
	r.polls.Add(1)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d: %s", code, clip(b))
	}
	var n int64
	if err == nil {
		n, err = parseSeqCount(b)
	}
	if err != nil {
		if ctx.Err() == nil && posted {
			r.pollErrors.Add(1)
			r.sample("GET /list/sequenced/count"+q(g.name), err)
		}
		return
	}
	g.count.Store(n)
	if n > g.sent && n > g.over.Load() {
		g.over.Store(n)
	}
	if n >= g.sent && g.doneNs.Load() == 0 {
		g.doneNs.Store(max(int64(time.Since(r.start)), 1))
	}
}

// waitSequenced polls every unfinished group each tick until all are
// complete, the timeout passes or ctx ends.
func (r *seqRun) waitSequenced(ctx context.Context) error {
	deadline := time.After(r.o.Timeout)
	t := time.NewTicker(r.poll)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		open := 0
		for _, g := range r.groups {
			if g.doneNs.Load() != 0 {
				continue
			}
			open++
			wg.Go(func() { r.count(ctx, g) })
		}
		wg.Wait()
		if open == 0 || r.allDone() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("not every message sequenced within --timeout %s (%s of %s)", r.o.Timeout, grouped(r.sequenced()), grouped(r.sent()))
		case <-t.C:
		}
	}
}

func (r *seqRun) allDone() bool {
	for _, g := range r.groups {
		if g.doneNs.Load() == 0 {
			return false
		}
	}
	return true
}

func (r *seqRun) sequenced() int64 {
	var n int64
	for _, g := range r.groups {
		n += min(g.count.Load(), g.sent)
	}
	return n
}

func (r *seqRun) sent() int64 { return int64(len(r.groups)) * int64(r.o.Messages) }

// progress prints sequenced so far and the rate over the last second,
// once a second, until stopped.
func (r *seqRun) progress() (stop func()) {
	var last int64
	lastAt := r.start
	return progress(r.o.Stderr, r.o.ProgressTTY, time.Second, func() string {
		now := time.Now()
		n := r.sequenced()
		line := fmt.Sprintf("%s  %.0f s  sequenced %s / %s (%s/s)  polls %s  errors %d",
			r.label, now.Sub(r.start).Seconds(), grouped(n), grouped(r.sent()),
			grouped(int64(float64(n-last)/now.Sub(lastAt).Seconds())), grouped(r.polls.Load()), r.pollErrors.Load())
		last, lastAt = n, now
		return line
	})
}

// readStats fetches every group's /list/stats and /list/perfs.
func (r *seqRun) readStats(ctx context.Context) error {
	return r.each(ctx, 8, func(g *seqGroup) error {
		rep := g.rep
		code, b, err := r.do(ctx, http.MethodGet, "/list/stats"+q(g.name), nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d: %s", code, clip(b))
		}
		if err != nil {
			return fmt.Errorf("GET /list/stats%s: %w", q(g.name), err)
		}
		rep.RawStats = json.RawMessage(b)
		if rep.Stats, err = parseSeqStats(b); err != nil {
			rep.RawStats = nil
			return fmt.Errorf("GET /list/stats%s: %w", q(g.name), err)
		}
		code, b, err = r.do(ctx, http.MethodGet, "/list/perfs"+q(g.name), nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d: %s", code, clip(b))
		}
		if err != nil {
			return fmt.Errorf("GET /list/perfs%s: %w", q(g.name), err)
		}
		if json.Valid(b) {
			rep.RawPerfs = json.RawMessage(b)
		}
		if v, ok := perfsAverage(b); ok {
			rep.ServerAverageRate = &v
		}
		return nil
	})
}

// SeqGroupReport is one group of a scenario.
type SeqGroupReport struct {
	Name      string  `json:"name"`
	Sent      int64   `json:"sent"`
	Sequenced int64   `json:"sequenced"` // the last count polled
	Seconds   float64 `json:"seconds"`   // POST start to count complete; 0 if never
	Stats     SeqStats
	// ServerAverageRate is the average rate /list/perfs reported.
	ServerAverageRate *float64        `json:"serverAverageRate,omitempty"`
	RawStats          json.RawMessage `json:"rawStats,omitempty"`
	RawPerfs          json.RawMessage `json:"rawPerfs,omitempty"`
}

// SeqScenarioReport is one scenario against one server.
type SeqScenarioReport struct {
	Scenario         string  `json:"scenario"`
	Server           string  `json:"server"`
	Groups           int     `json:"groups"`
	MessagesPerGroup int     `json:"messagesPerGroup"`
	CreationDelayMs  int     `json:"creationDelayMs"`
	ProcessingTimeMs int     `json:"processingTimeMs"`
	PollMs           float64 `json:"pollMs"`

	Sent      int64 `json:"sent"`
	Sequenced int64 `json:"sequenced"`
	Complete  bool  `json:"complete"`
	// Seconds is from the first POST /messages to the poll that saw the
	// last group's count complete; PerSecond is Sent over it.
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"perSecond"`
	PostSeconds float64 `json:"slowestPostSeconds"`
	// FirstGroupSeconds: the first group complete (groups scenario).
	FirstGroupSeconds float64 `json:"firstGroupSeconds,omitempty"`

	// Ordered is false if any group's isOrdered was false, nil if none
	// reported one.
	Ordered         *bool    `json:"isOrdered"`
	UnorderedGroups []string `json:"unorderedGroups,omitempty"`
	// Duplicates: groups whose count went past what was sent.
	Duplicates []string `json:"groupsCountedPastSent,omitempty"`
	// Stages is the group's per-stage latency (groups scenario: the worst
	// group per figure).
	Stages            []SeqStage `json:"stages"`
	ServerAverageRate *float64   `json:"serverAverageRate,omitempty"` // one group's, or the sum over groups

	Polls        int64    `json:"polls"`
	PollErrors   int64    `json:"pollErrors"`
	ErrorSamples []string `json:"errorSamples,omitempty"`

	ServerCPU    *float64 `json:"serverCpuSeconds,omitempty"`
	CPUPerMsgUs  *float64 `json:"serverCpuPerMessageUs,omitempty"`
	GeneratorCPU float64  `json:"generatorCpuSeconds"`
	PeakRSSBytes *int64   `json:"serverPeakRssBytes,omitempty"`

	PerGroup []*SeqGroupReport `json:"perGroup"`
}

// measure runs the scenario: reset, POST every group's messages, poll the
// counts until complete, then read stats and perfs. cpu reads the server's
// CPU seconds, taken around the POST-to-complete window only.
func (r *seqRun) measure(ctx context.Context, cpu func() (float64, error)) (*SeqScenarioReport, error) {
	defer r.hc.CloseIdleConnections()
	if err := r.reset(ctx); err != nil {
		return nil, err
	}
	rep := &SeqScenarioReport{Scenario: r.scenario, Groups: len(r.groups), MessagesPerGroup: r.o.Messages,
		PollMs: float64(r.poll) / float64(time.Millisecond), Sent: r.sent()}
	c := r.create("")
	rep.CreationDelayMs, rep.ProcessingTimeMs = c.CreationDelay, c.ProcessingTime
	m := meterCPU(cpu)
	r.start = time.Now()
	stop := r.progress()
	pctx, cancelPoll := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- r.waitSequenced(pctx) }()
	postTook, err := r.post(ctx)
	if err != nil {
		cancelPoll()
		<-waited
		stop()
		return nil, err
	}
	err = <-waited
	cancelPoll()
	stop()
	rep.GeneratorCPU = m.generator()
	if c, ok := m.usedOrWarn(r.o.Stderr, r.label); ok {
		rep.ServerCPU = &c
		if seq := r.sequenced(); seq > 0 {
			us := c * 1e6 / float64(seq)
			rep.CPUPerMsgUs = &us
		}
	}
	rep.PostSeconds = postTook.Seconds()
	rep.Sequenced = r.sequenced()
	rep.Complete = err == nil && r.allDone()
	var last, first time.Duration
	for _, g := range r.groups {
		d := time.Duration(g.doneNs.Load())
		g.rep = &SeqGroupReport{Name: g.name, Sent: g.sent, Sequenced: g.count.Load(), Seconds: d.Seconds()}
		rep.PerGroup = append(rep.PerGroup, g.rep)
		if o := g.over.Load(); o > 0 {
			rep.Duplicates = append(rep.Duplicates, fmt.Sprintf("%s: %d of %d", g.name, o, g.sent))
		}
		if d > 0 {
			last = max(last, d)
			if first == 0 || d < first {
				first = d
			}
		}
	}
	if rep.Complete {
		rep.Seconds = last.Seconds()
		rep.PerSecond = float64(rep.Sent) / rep.Seconds
		if len(r.groups) > 1 {
			rep.FirstGroupSeconds = first.Seconds()
		}
	}
	if err == nil {
		err = r.readStats(ctx)
	}
	r.summarize(rep)
	rep.Polls, rep.PollErrors = r.polls.Load(), r.pollErrors.Load()
	r.mu.Lock()
	rep.ErrorSamples = append([]string(nil), r.samples...)
	r.mu.Unlock()
	return rep, err
}

// summarize folds the groups' stats into the scenario's.
func (r *seqRun) summarize(rep *SeqScenarioReport) {
	var all [][]SeqStage
	var rate float64
	rated := false
	for _, g := range rep.PerGroup {
		if o := g.Stats.Ordered; o != nil {
			if rep.Ordered == nil {
				t := true
				rep.Ordered = &t
			}
			if !*o {
				f := false
				rep.Ordered = &f
				rep.UnorderedGroups = append(rep.UnorderedGroups, g.Name)
			}
		}
		if len(g.Stats.Stages) > 0 {
			all = append(all, g.Stats.Stages)
		}
		if g.ServerAverageRate != nil {
			rate += *g.ServerAverageRate
			rated = true
		}
	}
	if len(all) == 1 {
		rep.Stages = all[0]
	} else {
		rep.Stages = worstStages(all)
	}
	if rated {
		rep.ServerAverageRate = &rate
	}
}

// SequencerReport is everything `surge bench sequencer` measured; --json
// writes it.
type SequencerReport struct {
	Benchmark string               `json:"benchmark"`
	Config    SequencerConfig      `json:"config"`
	Scenarios []*SeqScenarioReport `json:"scenarios"`
	Peer      SequencerPeer        `json:"peer"`
	Goals     []Goal               `json:"goals"`
	Verdict
}

// SequencerConfig records the flags a run used.
type SequencerConfig struct {
	Scenarios        []string `json:"scenarios"`
	Messages         int      `json:"messagesPerGroup"`
	Groups           int      `json:"groups"`
	ProcessingTimeMs int      `json:"processingTimeMs"`
	CreationDelayMs  int      `json:"creationDelayMs"`
	GroupsDelayMs    int      `json:"groupsCreationDelayMs"`
	PollMs           float64  `json:"pollMs"`
	TimeoutSeconds   float64  `json:"timeoutSeconds"`
	Target           string   `json:"target,omitempty"`
	Partitions       int      `json:"partitions,omitempty"`
}

// SequencerPeer is the peer's best published run (docs/BENCHMARKS.md).
type SequencerPeer struct {
	Messages  int     `json:"messages"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"perSecond"`
	Setup     string  `json:"setup"`
}

var sequencerPeer = SequencerPeer{Messages: 60_000, Seconds: 19, PerSecond: 3158,
	Setup: "10 processors, 3 sequencers on 3 × 4 vCPU plus Redis on an r7g.xlarge"}

// The sequencer goals.
const (
	seqGoalPeerSeconds  = 1.0
	seqGoalGroupsRate   = 200_000
	seqGoalGroups       = 64
	seqGoalLatencyRate  = seqGoalGroupsRate / 2
	seqGoalLatencyP99Ms = 20
)

func (rep *SequencerReport) judge() {
	rep.Goals = nil
	var peer, groups *SeqScenarioReport
	for _, s := range rep.Scenarios {
		switch s.Scenario {
		case SeqScenarioPeer:
			peer = s
		case SeqScenarioGroups:
			groups = s
		}
	}
	if peer != nil {
		var v *float64
		note := fmt.Sprintf("peer %s messages in %.0f s", grouped(int64(sequencerPeer.Messages)), sequencerPeer.Seconds)
		if peer.Complete {
			v = &peer.Seconds
		}
		g := goal("peer run sequenced end to end (s)", "< 1 s", "s", v, func(v float64) bool { return v < seqGoalPeerSeconds }, note)
		if peer.MessagesPerGroup != sequencerPeer.Messages {
			g.Met, g.Note = nil, fmt.Sprintf("goal is for %s messages; this run sent %s", grouped(int64(sequencerPeer.Messages)), grouped(peer.Sent))
		}
		rep.Goals = append(rep.Goals, g)
	}
	if groups != nil {
		var v *float64
		if groups.Complete {
			v = &groups.PerSecond
		}
		g := goal(fmt.Sprintf("msg/s across %d groups", groups.Groups), "≥ 200,000", "", v,
			func(v float64) bool { return v >= seqGoalGroupsRate }, fmt.Sprintf("peer %s msg/s", grouped(int64(sequencerPeer.PerSecond))))
		switch {
		case groups.Groups != seqGoalGroups:
			g.Met, g.Note = nil, fmt.Sprintf("goal is for %d groups", seqGoalGroups)
		case groups.CreationDelayMs != 0:
			g.Met, g.Note = nil, fmt.Sprintf("paced by creationDelay %d ms", groups.CreationDelayMs)
		}
		rep.Goals = append(rep.Goals, g)
		// The goal is stated at half the groups rate. A run at least that
		// fast (within 5 %: a paced run's total time includes its tail) that
		// meets it meets it at that rate too; a slower one, or one that
		// misses it at a higher rate, says nothing about it.
		var p99 *float64
		if s, ok := findStage(groups.Stages, "created", "sequenced"); ok {
			p99 = &s.P99Ms
		}
		g = goal("created→sequenced p99 (ms, worst group)", "< 20 ms at 100,000 msg/s", "ms", p99,
			func(v float64) bool { return v < seqGoalLatencyP99Ms }, fmt.Sprintf("measured at %s msg/s", grouped(int64(groups.PerSecond+0.5))))
		if g.Met != nil && (groups.PerSecond < 0.95*seqGoalLatencyRate || !*g.Met) {
			g.Met = nil
		}
		rep.Goals = append(rep.Goals, g)
	}
}

var errSequencerFailed = errors.New("sequencer bench failed")

// RunSequencer runs each scenario against a fresh `surge serve` (or
// --target), prints the report and writes the JSON.
func RunSequencer(ctx context.Context, o SequencerOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	scenarios, _ := o.scenarios()
	rep := &SequencerReport{Benchmark: "sequencer", Peer: sequencerPeer, Config: SequencerConfig{
		Scenarios: scenarios, Messages: o.Messages, Groups: o.Groups, ProcessingTimeMs: o.ProcessingTime,
		CreationDelayMs: o.CreationDelay, GroupsDelayMs: o.GroupsDelay, PollMs: float64(o.Poll) / float64(time.Millisecond),
		TimeoutSeconds: o.Timeout.Seconds(), Target: o.Target, Partitions: o.Partitions}}
	return runScenario(ctx, o.Options, "surge-bench-sequencer-", &sequencerBench{o: o, scenarios: scenarios, rep: rep})
}

// sequencerBench is the sequencer scenario: each of --scenario against a
// fresh server, the goals judged over all of them.
type sequencerBench struct {
	o         SequencerOptions
	scenarios []string
	rep       *SequencerReport
}

func (b *sequencerBench) report() any       { return b.rep }
func (b *sequencerBench) verdict() *Verdict { return &b.rep.Verdict }
func (b *sequencerBench) failed() error     { return errSequencerFailed }
func (b *sequencerBench) passed() string {
	return "OK: every message sequenced, each group in order, no count past what was sent"
}

func (b *sequencerBench) setup(context.Context, *Rig) error {
	writeSequencerHeader(b.o.Stdout, b.rep)
	return nil
}

func (b *sequencerBench) load(ctx context.Context, rig *Rig) error {
	for _, sc := range b.scenarios {
		s, err := runSeqScenario(ctx, b.o, rig, sc)
		if s != nil {
			b.rep.Scenarios = append(b.rep.Scenarios, s)
			writeSeqScenario(b.o.Stdout, s)
			b.rep.add(s.problems()...)
		}
		if err != nil {
			b.rep.add(sc + ": " + err.Error())
			if ctx.Err() != nil {
				break
			}
		}
	}
	return nil
}

func (b *sequencerBench) judge(out io.Writer) {
	b.rep.judge()
	writeSequencerGoals(out, b.rep)
}

// problems are what makes a finished scenario a failure.
func (s *SeqScenarioReport) problems() []string {
	var p []string
	if !s.Complete {
		p = append(p, fmt.Sprintf("%s: %s of %s messages sequenced", s.Scenario, grouped(s.Sequenced), grouped(s.Sent)))
	}
	if s.Ordered == nil && s.Complete {
		p = append(p, s.Scenario+": /list/stats has no isOrdered")
	}
	if len(s.UnorderedGroups) > 0 {
		p = append(p, fmt.Sprintf("%s: out of order in %d group(s): %s", s.Scenario, len(s.UnorderedGroups), strings.Join(first(s.UnorderedGroups, 5), ", ")))
	}
	if len(s.Duplicates) > 0 {
		p = append(p, fmt.Sprintf("%s: count went past what was sent (duplicates) in %s", s.Scenario, strings.Join(first(s.Duplicates, 5), ", ")))
	}
	if s.PollErrors > 0 {
		p = append(p, fmt.Sprintf("%s: %s failed polls", s.Scenario, grouped(s.PollErrors)))
	}
	return p
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func runSeqScenario(ctx context.Context, o SequencerOptions, rig *Rig, sc string) (*SeqScenarioReport, error) {
	srv, err := rig.target(ctx, sc, "surge-sequencer-"+sc, "data-"+sc, "sequencer-"+sc)
	if err != nil {
		return nil, err
	}
	r := newSeqRun(o, sc, srv.base)
	rep, err := r.measure(ctx, srv.cpu(ctx))
	if rep != nil {
		rep.Server = srv.name(o.Options)
		rep.PeakRSSBytes = srv.peakRSS()
	}
	if o.Target != "" && ctx.Err() == nil {
		// Free what the run left on a server that outlives it (and stop
		// its processors, should any message be left).
		if derr := r.reset(ctx); derr != nil && err == nil {
			err = derr
		}
	}
	if err != nil {
		return rep, err
	}
	return rep, srv.stop()
}
