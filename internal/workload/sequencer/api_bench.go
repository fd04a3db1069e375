package sequencer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// The benchmark routes of docs/API.md: POST /messages
// creates a group's messages and in-process processors work through them;
// the /list routes report how far and how fast.
const (
	// DefaultBenchProcessors is the size of the processor pool every
	// benchmark group shares: bounded, so a client cannot make the server
	// start goroutines by the group.
	DefaultBenchProcessors = 32
	// MaxBenchMessages bounds numberOfMessages: the machine's window.
	MaxBenchMessages = DefaultMaxUnreleased
	// MaxBenchName bounds a benchmark group's name: its messages' ids are
	// "<name>-<n>", at most MaxIDLen bytes; a longer name made every
	// background publish fail after the 202.
	MaxBenchName = MaxIDLen - len("-1000000")
	// MaxBenchDelay bounds creationDelay and processingTime (ms).
	MaxBenchDelay = 60_000
	// benchLeaseBatch: how many messages a processor leases at once. Its
	// completions are one CompleteBatch, so a batch costs one command and
	// one group commit, not one per message.
	benchLeaseBatch = 100
	// benchLease outlives any processingTime: a message is leased again
	// only if its processor really stopped.
	benchLease = MaxBenchDelay*time.Millisecond + 30*time.Second
	// benchIdle: how long an idle processor waits before it looks again
	// without a Ready note (a missed note costs at most this).
	benchIdle = 200 * time.Millisecond
	// benchRetryPause: how long a creator waits before it publishes again
	// after an overload or a full window.
	benchRetryPause = 50 * time.Millisecond
)

type bench struct {
	a       *API
	workers int
	mu      sync.Mutex
	groups  map[string]*benchGroup
	order   []string // round robin over groups
	last    string   // most recently created
	next    int
	started bool
	closed  bool // set by stop: nothing starts after it
	wg      sync.WaitGroup
}

type benchGroup struct {
	name        string
	n           int
	processMs   int
	ctx         context.Context
	cancel      context.CancelFunc
	tracker     *tracker
	errMu       sync.Mutex
	publishErr  string
	publishDone bool
	// finished: every message is released; processors skip the group.
	finished atomic.Bool
}

func newBench(a *API, workers int) *bench {
	return &bench{a: a, workers: workers, groups: map[string]*benchGroup{}}
}

// wait waits for the processors and creators after a.done is closed.
func (b *bench) wait() {
	b.mu.Lock()
	b.closed = true // no Add may race with the Wait below
	b.mu.Unlock()
	b.wg.Wait()
}

// add registers a group, starts the pool on first use and the group's
// creator; false once the server is shutting down.
func (b *bench) add(bg *benchGroup, delayMs int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go b.create(bg, delayMs)
	b.groups[bg.name] = bg
	b.order = append(b.order, bg.name)
	b.last = bg.name
	if !b.started {
		b.started = true
		for i := range b.workers {
			b.wg.Add(1)
			go b.process(fmt.Sprintf("surge-bench-%d", i))
		}
	}
	return true
}

// drop stops the work on a group (its processors move on, its creator
// stops publishing).
func (b *bench) drop(name string) {
	b.mu.Lock()
	bg := b.groups[name]
	if bg != nil {
		delete(b.groups, name)
		b.order = slices.DeleteFunc(b.order, func(s string) bool { return s == name })
		bg.cancel()
	}
	b.mu.Unlock()
	b.a.hub.stopTracking(name)
}

func (b *bench) get(name string) *benchGroup {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.groups[name]
}

// pick returns the groups in round-robin order from the next one, so
// every group gets processors.
func (b *bench) pick() []*benchGroup {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.order)
	out := make([]*benchGroup, 0, n)
	for i := range n {
		out = append(out, b.groups[b.order[(b.next+i)%n]])
	}
	b.next++
	return out
}

// process is one processor of the pool: it leases from the benchmark
// groups, sleeps processingTime and completes, until shutdown.
func (b *bench) process(id string) {
	defer b.wg.Done()
	a := b.a
	idle := time.NewTimer(benchIdle)
	defer idle.Stop()
	for {
		ready := a.hub.readyChan()
		worked := false
		for _, bg := range b.pick() {
			if bg.ctx.Err() != nil || bg.finished.Load() {
				continue
			}
			res, err := a.doRaw(bg.ctx, bg.name, &Lease{Group: bg.name, Processor: id, Max: benchLeaseBatch, LeaseNs: int64(benchLease)})
			if err != nil {
				continue
			}
			if res.Position >= uint64(bg.n) {
				bg.finished.Store(true)
			}
			if len(res.Messages) == 0 {
				continue
			}
			worked = true
			if bg.processMs > 0 {
				// The leased messages are processed side by side, each
				// taking processingTime, as the peer's processors do.
				select {
				case <-time.After(time.Duration(bg.processMs) * time.Millisecond):
				case <-bg.ctx.Done():
				case <-a.done:
					return
				}
			}
			seqs := make([]uint64, len(res.Messages))
			for i, m := range res.Messages {
				seqs[i] = m.Seq
			}
			b.completeAll(bg, id, seqs)
		}
		select {
		case <-a.done:
			return
		default:
		}
		if worked {
			continue
		}
		idle.Reset(benchIdle)
		select {
		case <-ready:
		case <-idle.C:
		case <-a.done:
			return
		}
	}
}

// completeAll completes a lease's messages in one command, again after
// a pause if the engine did not take it (an overload sheds commands): a
// message left leased would hold the group's output for the whole
// lease. A repeat of one already done is Same.
func (b *bench) completeAll(bg *benchGroup, id string, seqs []uint64) {
	cmd := &CompleteBatch{Group: bg.name, Processor: id, Seqs: seqs}
	for {
		_, err := b.a.doRaw(bg.ctx, bg.name, cmd)
		if !errors.Is(err, engine.ErrOverloaded) {
			return
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-bg.ctx.Done():
			return
		case <-b.a.done:
			// The lease runs out and the message is processed again
			// after a restart: at least once, never lost.
			return
		}
	}
}

// groupRefused tells a limit that will not pass from a full window: a
// group that does not exist after its publish was refused was not created
// (its partition holds its limit of groups), and waiting would publish
// nothing for ever while the count stays 0.
func (b *bench) groupRefused(bg *benchGroup) bool {
	in, err := b.a.info(bg.ctx, bg.name)
	return err == nil && in == nil
}

// create publishes a benchmark group's messages: ids name-1, name-2, …
// in creation order, which is seq order, so the order check can tell a
// message out of place. With no delay, in batches of MaxBatch.
func (b *bench) create(bg *benchGroup, delayMs int) {
	defer b.wg.Done()
	defer func() {
		bg.errMu.Lock()
		bg.publishDone = true
		bg.errMu.Unlock()
	}()
	if delayMs == 0 {
		b.publishAll(bg)
		return
	}
	b.publishPaced(bg, time.Duration(delayMs)*time.Millisecond)
}

// publishAll publishes the group's messages at once, MaxBatch a command.
func (b *bench) publishAll(bg *benchGroup) {
	for from := 1; from <= bg.n; from += MaxBatch {
		batch := &PublishBatch{MaxHeldBytes: DefaultMaxHeldBytes}
		for i := from; i < from+MaxBatch && i <= bg.n; i++ {
			batch.Msgs = append(batch.Msgs, b.benchMsg(bg, i))
		}
		if !b.publishUntilTaken(bg, batch) {
			return
		}
	}
}

// publishPaced publishes message i delay·(i-1) after the start. Each
// publish takes what is due by then as one batch, so a delay shorter than
// a durable write (1 ms against a ~2 ms fsync) still keeps the schedule
// instead of falling behind one write per message.
func (b *bench) publishPaced(bg *benchGroup, delay time.Duration) {
	start := time.Now()
	for next := 1; next <= bg.n; {
		due := min(bg.n, 1+int(time.Since(start)/delay), next+MaxBatch-1)
		if due < next {
			wait := time.Until(start.Add(time.Duration(next-1) * delay))
			select {
			case <-time.After(wait):
			case <-bg.ctx.Done():
				return
			case <-b.a.done:
				return
			}
			continue
		}
		var cmd engine.Command
		if due == next {
			p := b.benchMsg(bg, next)
			cmd = &p
		} else {
			batch := &PublishBatch{MaxHeldBytes: DefaultMaxHeldBytes}
			for i := next; i <= due; i++ {
				batch.Msgs = append(batch.Msgs, b.benchMsg(bg, i))
			}
			cmd = batch
		}
		if !b.publishUntilTaken(bg, cmd) {
			return
		}
		next = due + 1
	}
}

// benchMsg is the group's message i.
func (b *bench) benchMsg(bg *benchGroup, i int) Publish {
	return Publish{Group: bg.name, MsgID: bg.name + "-" + strconv.Itoa(i), RetentionNs: int64(b.a.retention), MaxHeldBytes: DefaultMaxHeldBytes}
}

// publishUntilTaken publishes cmd until it is taken (true), the group is
// dropped or the server stops, or it is refused for good: then the
// refusal is the group's publish error.
func (b *bench) publishUntilTaken(bg *benchGroup, cmd engine.Command) bool {
	for {
		res, err := b.a.doRaw(bg.ctx, bg.name, cmd)
		if err == nil && (res.Outcome == Created || res.Outcome == Same) {
			return true
		}
		if bg.ctx.Err() != nil {
			return false
		}
		if err == nil && (res.Outcome != Exhausted || b.groupRefused(bg)) {
			bg.errMu.Lock()
			bg.publishErr = res.Msg
			bg.errMu.Unlock()
			return false
		}
		// Overloaded or a full window: the same ids again later
		// publish nothing twice.
		select {
		case <-time.After(benchRetryPause):
		case <-bg.ctx.Done():
			return false
		case <-b.a.done:
			return false
		}
	}
}

type benchBody struct {
	Name             string `json:"name"`
	NumberOfMessages int    `json:"numberOfMessages"`
	CreationDelay    int    `json:"creationDelay"`
	ProcessingTime   int    `json:"processingTime"`
}

// benchCreate serves POST /messages. The messages are published in the
// background (with a creation delay that can take long); the answer says
// the run started. The group must be new: the order check counts on
// seq = creation index.
func (a *API) benchCreate(w http.ResponseWriter, r *http.Request) int {
	var b benchBody
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if p := checkName("name", b.Name, MaxBenchName); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	if b.NumberOfMessages < 1 || b.NumberOfMessages > MaxBenchMessages {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("numberOfMessages must be from 1 to %d, got %d", MaxBenchMessages, b.NumberOfMessages))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"creationDelay", b.CreationDelay}, {"processingTime", b.ProcessingTime}} {
		if f.v < 0 || f.v > MaxBenchDelay {
			return api.Error(w, http.StatusBadRequest, fmt.Sprintf("%s must be from 0 to %d ms, got %d", f.name, MaxBenchDelay, f.v))
		}
	}
	select {
	case <-a.done:
		return api.Error(w, http.StatusServiceUnavailable, "the server is shutting down")
	default:
	}
	in, err := a.info(r.Context(), b.Name)
	if err != nil {
		return engineError(w, err)
	}
	if in != nil || a.bench.get(b.Name) != nil {
		return api.Error(w, http.StatusConflict, "group "+api.Quote(b.Name)+" exists: DELETE /messages?name= it first, or pick another name")
	}
	ctx, cancel := context.WithCancel(context.Background())
	bg := &benchGroup{name: b.Name, n: b.NumberOfMessages, processMs: b.ProcessingTime, ctx: ctx, cancel: cancel}
	// Tracking starts before the first publish, so no Released note of
	// the group goes unrecorded.
	bg.tracker = a.hub.startTracking(b.Name)
	if !a.bench.add(bg, b.CreationDelay) {
		a.hub.stopTracking(b.Name)
		cancel()
		return api.Error(w, http.StatusServiceUnavailable, "the server is shutting down")
	}
	return writeJSON(w, http.StatusAccepted, b)
}

// benchName reads ?name=, defaulting to the group most recently created
// through POST /messages.
func (a *API) benchName(w http.ResponseWriter, r *http.Request) (string, int) {
	name := r.URL.Query().Get("name")
	if name == "" {
		a.bench.mu.Lock()
		name = a.bench.last
		a.bench.mu.Unlock()
		if name == "" {
			return "", api.Error(w, http.StatusBadRequest, "name is required: no group was created through POST /messages yet")
		}
	}
	if p := checkName("name", name, MaxNameLen); p != "" {
		return "", api.Error(w, http.StatusBadRequest, p)
	}
	return name, 0
}

// benchDelete serves DELETE /messages?name=: the group goes, with its
// processors' work on it.
func (a *API) benchDelete(w http.ResponseWriter, r *http.Request) int {
	name := r.URL.Query().Get("name")
	if p := checkName("name", name, MaxNameLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	wasBench := a.bench.get(name) != nil
	res, err := a.dropGroupRaw(r.Context(), name)
	if err != nil {
		return engineError(w, err)
	}
	if res.Outcome == NotFound && !wasBench {
		return api.Error(w, http.StatusNotFound, "no group "+api.Quote(name))
	}
	a.bench.mu.Lock()
	if a.bench.last == name {
		a.bench.last = ""
	}
	a.bench.mu.Unlock()
	return writeJSON(w, http.StatusOK, map[string]any{"name": name, "deleted": true})
}

func (a *API) dropGroupRaw(ctx context.Context, g string) (*Result, error) {
	a.bench.drop(g)
	return a.doRaw(ctx, g, &DeleteGroup{Group: g})
}

// benchCount serves GET /list/sequenced/count as the peer does: the
// number alone, as text, which its script compares with what it sent.
func (a *API) benchCount(w http.ResponseWriter, r *http.Request) int {
	name, st := a.benchName(w, r)
	if st != 0 {
		return st
	}
	in, err := a.info(r.Context(), name)
	if err != nil {
		return engineError(w, err)
	}
	var n uint64
	bg := a.bench.get(name)
	switch {
	case in != nil:
		n = in.Position
	case bg == nil:
		return api.Error(w, http.StatusNotFound, "no group "+api.Quote(name))
	}
	if in == nil {
		// Nothing published, and nothing will be: say why rather than 0
		// to a script that polls until the count is reached.
		bg.errMu.Lock()
		msg := bg.publishErr
		bg.errMu.Unlock()
		if msg != "" {
			return api.Error(w, http.StatusConflict, "group "+api.Quote(name)+" was not created: "+msg)
		}
	}
	// A benchmark group whose first messages are not published yet has
	// sequenced none.
	api.Write(w, http.StatusOK, false, strconv.AppendUint(nil, n, 10))
	return http.StatusOK
}

func (a *API) benchStats(w http.ResponseWriter, r *http.Request) int {
	name, st := a.benchName(w, r)
	if st != 0 {
		return st
	}
	s, st := a.collect(w, r, name)
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, s.statsOut())
}

func (a *API) benchPerfs(w http.ResponseWriter, r *http.Request) int {
	name, st := a.benchName(w, r)
	if st != 0 {
		return st
	}
	s, st := a.collect(w, r, name)
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, s.perfsOut())
}

// collect reads the group's released output a page at a time into
// fixed-size histograms and per-second counts.
func (a *API) collect(w http.ResponseWriter, r *http.Request, name string) (*stats, int) {
	in, err := a.info(r.Context(), name)
	if err != nil {
		return nil, engineError(w, err)
	}
	if in == nil && a.bench.get(name) == nil {
		return nil, api.Error(w, http.StatusNotFound, "no group "+api.Quote(name))
	}
	s := newStats(name, a.hub.tracked(name))
	if bg := a.bench.get(name); bg != nil {
		bg.errMu.Lock()
		s.sent, s.publishErr, s.publishing = bg.n, bg.publishErr, !bg.publishDone
		bg.errMu.Unlock()
	}
	s.info = in
	var after uint64
	for {
		out, err := a.read(r.Context(), name, after, maxReadLimit)
		if err != nil {
			return nil, engineError(w, err)
		}
		if !out.Found {
			break
		}
		for i := range out.Messages {
			s.add(&out.Messages[i])
		}
		if len(out.Messages) < maxReadLimit {
			break
		}
		after = out.Messages[len(out.Messages)-1].Seq
	}
	return s, 0
}
