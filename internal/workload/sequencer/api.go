package sequencer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
)

// Limits of the HTTP API.
const (
	// maxBody: one message of the largest payload with room for its
	// fields; maxBatchBody: a batch of MaxBatch messages.
	maxBody      = MaxPayloadBytes + 64<<10
	maxBatchBody = 8 << 20
	maxSmallBody = 64 << 10
	// MaxMessageBytes bounds a gRPC request message: the HTTP batch
	// body's limit, so a batch fits both.
	MaxMessageBytes = maxBatchBody
	// MaxLeaseBytes bounds the payloads of one lease's answer (Lease
	// MaxBytes), as MaxBatchPayloadBytes bounds a publish's: at least one
	// message is always leased, so a 1 MiB payload is never stuck.
	MaxLeaseBytes = 8 << 20
	// MaxBatchPayloadBytes bounds the sum of a publish batch's payloads
	// (413 / RESOURCE_EXHAUSTED beyond): 1,000 messages of 1 MiB would be
	// one log entry of 1 GB, past cmdlog.MaxEntryBytes. With it the
	// largest batch's command stays under 9 MiB.
	MaxBatchPayloadBytes = 8 << 20
	// MaxWait bounds a long poll's wait.
	MaxWait = 60 * time.Second
	// DefaultMaxWaiters bounds the long polls and streams open at once.
	DefaultMaxWaiters = 10_000
	// DefaultLease is a lease's length when the processor names none.
	DefaultLease = 30 * time.Second
	// MaxLease bounds a lease's length: a dead processor's messages come
	// back within it.
	MaxLease = time.Hour
	// streamPing is how often an idle stream sends a comment, so proxies
	// keep it open.
	streamPing = 15 * time.Second
)

// API serves the sequencer's native routes and the benchmark routes of
// docs/API.md over an engine that runs Workload.
type API struct {
	eng       *engine.Engine
	hub       *Hub
	retention time.Duration
	done      chan struct{}
	stopOnce  sync.Once
	bench     *bench
}

// NewAPI returns the sequencer API over eng; hub receives the engine's
// notes (see Hub.Notify).
func NewAPI(eng *engine.Engine, hub *Hub) *API {
	a := &API{eng: eng, hub: hub, retention: time.Duration(DefaultRetentionNs), done: make(chan struct{})}
	a.bench = newBench(a, DefaultBenchProcessors)
	return a
}

// SetRetention sets how long released messages published from now on are
// kept when no consumer has passed them; each Publish logs it, so replay
// purges what the live run purged.
func (a *API) SetRetention(d time.Duration) *API {
	if d > 0 {
		a.retention = d
	}
	return a
}

// SetBenchProcessors sets the size of the benchmark's processor pool
// (before the first POST /messages).
func (a *API) SetBenchProcessors(n int) *API {
	if n > 0 {
		a.bench.workers = n
	}
	return a
}

// Shutdown ends every long poll and stream at once and stops the
// benchmark's processors, so a graceful shutdown does not wait for them.
func (a *API) Shutdown() {
	a.stopOnce.Do(func() { close(a.done) })
	a.bench.wait()
}

// Register adds the routes to mux.
func (a *API) Register(mux *http.ServeMux, m *api.Metrics) {
	m.Handle(mux, "GET /v1/groups", a.listGroups)
	m.Handle(mux, "GET /v1/groups/{group}", a.groupInfo)
	m.Handle(mux, "DELETE /v1/groups/{group}", a.deleteGroup)
	m.Handle(mux, "POST /v1/groups/{group}/messages", a.publish)
	m.Handle(mux, "POST /v1/groups/{group}/lease", a.lease)
	m.Handle(mux, "POST /v1/groups/{group}/complete", a.complete)
	m.Handle(mux, "POST /v1/groups/{group}/extend", a.extend)
	m.Handle(mux, "POST /v1/groups/{group}/release", a.release)
	m.Handle(mux, "GET /v1/groups/{group}/output", a.output)
	m.Handle(mux, "GET /v1/groups/{group}/output/stream", a.stream)
	m.Handle(mux, "POST /v1/groups/{group}/consumers/{consumer}/commit", a.commit)

	m.Handle(mux, "POST /messages", a.benchCreate)
	m.Handle(mux, "DELETE /messages", a.benchDelete)
	m.Handle(mux, "GET /list/sequenced/count", a.benchCount)
	m.Handle(mux, "GET /list/stats", a.benchStats)
	m.Handle(mux, "GET /list/perfs", a.benchPerfs)
}

// --- plumbing ---

func (a *API) part(group string) int { return a.eng.PartitionOf(GroupKey(group)) }

// do applies cmd at the group's partition. If the engine failed or the
// machine refused the command, it has answered and returns that status.
func (a *API) do(ctx context.Context, w http.ResponseWriter, group string, cmd engine.Command) (*Result, int) {
	res, err := a.doRaw(ctx, group, cmd)
	if err != nil {
		return nil, engineError(w, err)
	}
	return res, refused(w, res)
}

func (a *API) doRaw(ctx context.Context, group string, cmd engine.Command) (*Result, error) {
	return engine.Do[*Result](ctx, a.eng, a.part(group), WorkloadID, cmd)
}

func (a *API) info(ctx context.Context, group string) (*Info, error) {
	return engine.Query[*Info](ctx, a.eng, a.part(group), WorkloadID, GroupInfo{Group: group})
}

func (a *API) read(ctx context.Context, group string, after uint64, limit int) (*Output, error) {
	return engine.Query[*Output](ctx, a.eng, a.part(group), WorkloadID, ReadOutput{Group: group, After: after, Limit: limit})
}

func engineError(w http.ResponseWriter, err error) int {
	return api.EngineError(w, err, "server is busy: nothing was done, retry after the Retry-After pause")
}

// status maps a refusal to its HTTP status (0 for a success).
func status(o Outcome) int {
	switch o {
	case OK, Created, Same:
		return 0
	case NotFound:
		return http.StatusNotFound
	case Invalid:
		return http.StatusBadRequest
	case Conflict:
		return http.StatusConflict
	case Exhausted:
		// A full window empties as messages are released; a retry later
		// can succeed, which is what 429 and its Retry-After say.
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// refused answers a Result that is not a success, or returns 0.
func refused(w http.ResponseWriter, res *Result) int {
	st := status(res.Outcome)
	if st == 0 {
		return 0
	}
	return api.Error(w, st, res.Msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return api.Error(w, http.StatusInternalServerError, err.Error())
	}
	api.Write(w, status, true, append(b, '\n'))
	return status
}

// checkName is the rule for a group, processor or consumer name, on
// every route and call (api.CheckName): what the machine would refuse,
// and text that is no name (control or bidi characters, a path), refused
// before anything is logged.
func checkName(what, s string, max int) string {
	if p := api.CheckName(s, max); p != "" {
		return what + " " + p
	}
	return ""
}

// checkMessageID is the rule for a message id a publisher picks: printable
// text, '/' allowed.
func checkMessageID(s string) string {
	if p := api.CheckID(s, 1, MaxIDLen); p != "" {
		return "id " + p
	}
	return ""
}

// checkPayload is the rule for a payload: JSON (the HTTP routes serve it
// inline) with text strings, as an HTTP body's strings must be, and no
// bidi controls.
func checkPayload(b []byte) string {
	if p := api.CheckJSONText(b); p != "" {
		return "payload " + p
	}
	return ""
}

// pathGroup reads {group}, or answers 400.
func pathGroup(w http.ResponseWriter, r *http.Request) (string, int) {
	g := r.PathValue("group")
	if p := checkName("group name", g, MaxNameLen); p != "" {
		return "", api.Error(w, http.StatusBadRequest, p)
	}
	return g, 0
}

// parseWait reads a wait in ms (a body's waitMs) or as ?wait= (a Go
// duration such as 10s, or whole seconds).
func parseWait(s string) (time.Duration, string) {
	if s == "" {
		return 0, ""
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n, err2 := strconv.Atoi(s)
		if err2 != nil || n < 0 || n > int(MaxWait/time.Second) {
			return 0, fmt.Sprintf("wait must be a duration from 0s to %v (such as 10s or 500ms, or whole seconds), got %s", MaxWait, api.Quote(s))
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d > MaxWait {
		return 0, fmt.Sprintf("wait must be between 0s and %v, got %s", MaxWait, api.Quote(s))
	}
	return d, ""
}

func queryUint(w http.ResponseWriter, r *http.Request, name string, def uint64) (uint64, int) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, 0
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return 0, api.Error(w, http.StatusBadRequest, name+" must be a whole number from 0, got "+api.Quote(s))
	}
	return n, 0
}

// newID returns a random version-4 UUID: a publish without an id gets
// one, so a retry inside the engine never makes a second message.
func newID() string { return ids.New().String() }

// stamp renders an input time with full precision: stage latencies are
// often well under a millisecond.
func stamp(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

// --- wire forms ---

type messageDTO struct {
	Seq          uint64          `json:"seq"`
	ID           string          `json:"id"`
	Payload      json.RawMessage `json:"payload"`
	State        string          `json:"state"`
	Processor    string          `json:"processor,omitempty"`
	CreatedAt    string          `json:"createdAt"`
	ProcessingAt string          `json:"processingAt,omitempty"`
	ProcessedAt  string          `json:"processedAt,omitempty"`
	ReleasedAt   string          `json:"releasedAt,omitempty"`
	LeaseUntil   string          `json:"leaseUntil,omitempty"`
}

func messageOut(m *Message) messageDTO {
	p := json.RawMessage(m.Payload)
	if len(p) == 0 {
		p = json.RawMessage("null")
	}
	return messageDTO{Seq: m.Seq, ID: m.ID, Payload: p, State: m.State.String(), Processor: m.Processor,
		CreatedAt: stamp(m.Created), ProcessingAt: stamp(m.Processing), ProcessedAt: stamp(m.Processed),
		ReleasedAt: stamp(m.Released), LeaseUntil: stamp(m.LeaseUntil)}
}

func messagesOut(ms []Message) []messageDTO {
	out := make([]messageDTO, len(ms))
	for i := range ms {
		out[i] = messageOut(&ms[i])
	}
	return out
}

type consumerDTO struct {
	Name     string `json:"name"`
	Position uint64 `json:"position"`
}

type groupDTO struct {
	Name      string        `json:"name"`
	Mode      string        `json:"mode"`
	CreatedAt string        `json:"createdAt"`
	Position  uint64        `json:"position"`
	FirstKept uint64        `json:"firstKept"`
	Last      uint64        `json:"last"`
	Missing   uint64        `json:"missing,omitempty"`
	Pending   int           `json:"pending"`
	Leased    int           `json:"leased"`
	Processed int           `json:"processed"`
	Released  int           `json:"released"`
	Consumers []consumerDTO `json:"consumers"`
}

func groupOut(in *Info) groupDTO {
	d := groupDTO{Name: in.Name, Mode: in.Mode.String(), CreatedAt: stamp(in.CreatedAt), Position: in.Position,
		FirstKept: in.FirstKept, Last: in.Last, Missing: in.Missing, Pending: in.Pending, Leased: in.Leased,
		Processed: in.Processed, Released: in.Released, Consumers: make([]consumerDTO, len(in.Consumers))}
	for i, c := range in.Consumers {
		d.Consumers[i] = consumerDTO(c)
	}
	return d
}

// --- groups ---

func (a *API) listGroups(w http.ResponseWriter, r *http.Request) int {
	parts, err := engine.QueryAll[[]*Info](r.Context(), a.eng, WorkloadID, ListGroups{})
	if err != nil {
		return engineError(w, err)
	}
	out := []groupDTO{}
	for _, infos := range parts {
		for _, in := range infos {
			out = append(out, groupOut(in))
		}
	}
	sortGroups(out)
	return writeJSON(w, http.StatusOK, map[string]any{"groups": out})
}

func (a *API) groupInfo(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	in, err := a.info(r.Context(), g)
	if err != nil {
		return engineError(w, err)
	}
	if in == nil {
		return api.Error(w, http.StatusNotFound, "no group "+api.Quote(g))
	}
	return writeJSON(w, http.StatusOK, groupOut(in))
}

func (a *API) deleteGroup(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	if _, st := a.dropGroup(r.Context(), w, g); st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, map[string]any{"group": g, "deleted": true})
}

// dropGroup deletes a group and stops the benchmark's work on it.
func (a *API) dropGroup(ctx context.Context, w http.ResponseWriter, g string) (*Result, int) {
	res, err := a.dropGroupRaw(ctx, g)
	if err != nil {
		return nil, engineError(w, err)
	}
	return res, refused(w, res)
}

// --- publishing ---

type publishBody struct {
	ID      *string         `json:"id"`
	Seq     uint64          `json:"seq"`
	Payload json.RawMessage `json:"payload"`
}

type publishBatchBody struct {
	publishBody
	Messages []publishBody `json:"messages"`
}

// badInput is a publish refused before anything is logged: too large
// (413, RESOURCE_EXHAUSTED) or invalid (400, INVALID_ARGUMENT).
type badInput struct {
	tooLarge bool
	msg      string
}

func (b *badInput) status() int {
	if b.tooLarge {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// publishOf checks one message (the i-th of a batch, or alone if i < 0)
// and makes its command. The HTTP routes and the gRPC call both use it.
func (a *API) publishOf(g string, b *publishBody, i int) (Publish, *badInput) {
	where := ""
	if i >= 0 {
		where = fmt.Sprintf("message %d: ", i)
	}
	if n := len(b.Payload); n > MaxPayloadBytes {
		return Publish{}, &badInput{true, fmt.Sprintf("%spayload of %d bytes is over the limit of %d", where, n, MaxPayloadBytes)}
	}
	id := ""
	if b.ID != nil {
		id = *b.ID
		if p := checkMessageID(id); p != "" {
			return Publish{}, &badInput{msg: where + p}
		}
	} else {
		id = newID()
	}
	if b.Seq > 1<<63-1 {
		return Publish{}, &badInput{msg: fmt.Sprintf("%sseq must be at most %d", where, int64(1<<63-1))}
	}
	var payload []byte
	if len(b.Payload) > 0 && string(b.Payload) != "null" {
		if p := checkPayload(b.Payload); p != "" {
			return Publish{}, &badInput{msg: where + p}
		}
		payload = []byte(b.Payload)
	}
	return Publish{Group: g, MsgID: id, Seq: b.Seq, Payload: payload, RetentionNs: int64(a.retention)}, nil
}

// publishBatchOf checks a batch, all or nothing, and makes its command.
func (a *API) publishBatchOf(g string, msgs []publishBody) (*PublishBatch, *badInput) {
	if len(msgs) == 0 || len(msgs) > MaxBatch {
		return nil, &badInput{msg: fmt.Sprintf("messages must hold 1 to %d messages, got %d", MaxBatch, len(msgs))}
	}
	total := 0
	for i := range msgs {
		total += len(msgs[i].Payload)
	}
	if total > MaxBatchPayloadBytes {
		return nil, &badInput{true, fmt.Sprintf("the batch's payloads add up to %d bytes, over the limit of %d for one publish; split it into smaller batches",
			total, MaxBatchPayloadBytes)}
	}
	batch := &PublishBatch{Msgs: make([]Publish, len(msgs))}
	for i := range msgs {
		p, bad := a.publishOf(g, &msgs[i], i)
		if bad != nil {
			return nil, bad
		}
		batch.Msgs[i] = p
	}
	return batch, nil
}

// publish serves POST /v1/groups/{group}/messages: one message, or a
// batch under "messages" published all or nothing.
func (a *API) publish(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b publishBatchBody
	if st := api.ReadJSON(w, r, maxBatchBody, &b); st != 0 {
		return st
	}
	if b.Messages == nil {
		p, bad := a.publishOf(g, &b.publishBody, -1)
		if bad != nil {
			return api.Error(w, bad.status(), bad.msg)
		}
		res, st := a.do(r.Context(), w, g, &p)
		if st != 0 {
			return st
		}
		code := http.StatusCreated
		if res.Outcome == Same {
			code = http.StatusOK
		}
		return writeJSON(w, code, map[string]any{"seq": res.Seq, "id": p.MsgID})
	}
	if b.ID != nil || b.Seq != 0 || len(b.Payload) > 0 {
		return api.Error(w, http.StatusBadRequest, "send either one message (id, seq, payload) or a batch under \"messages\", not both")
	}
	batch, bad := a.publishBatchOf(g, b.Messages)
	if bad != nil {
		return api.Error(w, bad.status(), bad.msg)
	}
	res, st := a.do(r.Context(), w, g, batch)
	if st != 0 {
		return st
	}
	seqs := make([]uint64, len(res.Each))
	for i, e := range res.Each {
		seqs[i] = e.Seq
	}
	code := http.StatusCreated
	if res.Outcome == Same {
		code = http.StatusOK
	}
	return writeJSON(w, code, map[string]any{"seqs": seqs})
}

// --- processing ---

type leaseBody struct {
	Processor string `json:"processor"`
	Max       int32  `json:"max"`
	LeaseMs   int64  `json:"leaseMs"`
	WaitMs    int64  `json:"waitMs"`
}

func checkLeaseMs(ms int64) (time.Duration, string) {
	if ms == 0 {
		return DefaultLease, ""
	}
	if ms < 0 || ms > MaxLease.Milliseconds() {
		return 0, fmt.Sprintf("leaseMs must be from 1 to %d, got %d", MaxLease.Milliseconds(), ms)
	}
	return time.Duration(ms) * time.Millisecond, ""
}

// lease serves POST /v1/groups/{group}/lease: up to max messages, lowest
// seq first. While none is leasable it waits up to waitMs for a Ready
// note. A group nobody published to yet has no messages: the answer is
// an empty list, so processors may start before publishers.
func (a *API) lease(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b leaseBody
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if p := checkName("processor", b.Processor, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	if b.Max == 0 {
		b.Max = 1
	}
	if b.Max < 0 || b.Max > MaxLeaseBatch {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("max must be from 1 to %d, got %d", MaxLeaseBatch, b.Max))
	}
	lease, problem := checkLeaseMs(b.LeaseMs)
	if problem != "" {
		return api.Error(w, http.StatusBadRequest, problem)
	}
	if b.WaitMs < 0 || b.WaitMs > MaxWait.Milliseconds() {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("waitMs must be from 0 to %d, got %d", MaxWait.Milliseconds(), b.WaitMs))
	}
	ctx := r.Context()
	// The wait may outlast the server's write timeout, and the answer
	// must be known to have gone out (see replyLeased).
	rs := api.OpenStream(w, r)
	defer rs.Close()
	var wt *waiter
	if b.WaitMs > 0 {
		wt = a.hub.waiters.AddPoll(readyKey(g))
		defer a.hub.waiters.Remove(readyKey(g), wt)
	}
	deadline := time.Now().Add(time.Duration(b.WaitMs) * time.Millisecond)
	cmd := &Lease{Group: g, Processor: b.Processor, Max: b.Max, LeaseNs: int64(lease), MaxBytes: MaxLeaseBytes}
	for {
		// Not cancelled with the request: a lease taken as its client
		// goes must be known, to be given back.
		res, err := a.doRaw(context.WithoutCancel(ctx), g, cmd)
		if err != nil {
			return engineError(w, err)
		}
		if res.Outcome != NotFound {
			if st := refused(w, res); st != 0 {
				return st
			}
		}
		if len(res.Messages) > 0 || wt == nil {
			return a.replyLeased(ctx, rs, w, g, b.Processor, res)
		}
		left := time.Until(deadline)
		if left <= 0 || !wt.Wait(ctx, a.done, left) {
			if ctx.Err() != nil {
				return 499 // the client went away; nobody reads an answer
			}
			return a.replyLeased(ctx, rs, w, g, b.Processor, res)
		}
	}
}

type completeBody struct {
	Processor string   `json:"processor"`
	Seqs      []uint64 `json:"seqs"`
}

type completeDTO struct {
	Seq     uint64 `json:"seq"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// complete serves POST /v1/groups/{group}/complete: the seqs are one
// CompleteBatch, one log record and one group commit however many there
// are; the answer gives each one's outcome, and the status is the first
// refusal's if any was refused.
func (a *API) complete(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b completeBody
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if p := checkName("processor", b.Processor, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	if len(b.Seqs) == 0 || len(b.Seqs) > MaxLeaseBatch {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("seqs must hold 1 to %d seqs, got %d", MaxLeaseBatch, len(b.Seqs)))
	}
	for _, s := range b.Seqs {
		if s == 0 || s > 1<<63-1 {
			return api.Error(w, http.StatusBadRequest, fmt.Sprintf("seq %d is not a message's seq (1 to %d)", s, int64(1<<63-1)))
		}
	}
	res, err := a.doRaw(r.Context(), g, &CompleteBatch{Group: g, Processor: b.Processor, Seqs: b.Seqs})
	if err != nil {
		return engineError(w, err)
	}
	out := make([]completeDTO, len(b.Seqs))
	code, msg := http.StatusOK, ""
	for i := range b.Seqs {
		// A refusal of the whole command (no such group) is every seq's.
		e := res
		if res.Each != nil {
			e = res.Each[i]
		}
		out[i] = completeDTO{Seq: b.Seqs[i], Outcome: e.Outcome.String()}
		if st := status(e.Outcome); st != 0 {
			out[i].Error = e.Msg
			if code == http.StatusOK {
				code, msg = st, e.Msg
			}
		}
	}
	body := map[string]any{"results": out, "position": res.Position}
	if msg != "" {
		body["error"] = msg
	}
	return writeJSON(w, code, body)
}

func (a *API) extend(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b leaseBody
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if p := checkName("processor", b.Processor, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	lease, problem := checkLeaseMs(b.LeaseMs)
	if problem != "" {
		return api.Error(w, http.StatusBadRequest, problem)
	}
	res, st := a.do(r.Context(), w, g, &Extend{Group: g, Processor: b.Processor, LeaseNs: int64(lease)})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, map[string]any{"messages": messagesOut(res.Messages), "position": res.Position})
}

func (a *API) release(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b leaseBody
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if p := checkName("processor", b.Processor, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	res, st := a.do(r.Context(), w, g, &Release{Group: g, Processor: b.Processor})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, map[string]any{"released": res.Outcome == OK, "position": res.Position})
}

// --- consuming ---

// output serves GET /v1/groups/{group}/output?after=N&limit=&wait=: the
// released messages after N; with wait, it waits for a Released note
// while there are none.
func (a *API) output(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	after, st := queryUint(w, r, "after", 0)
	if st != 0 {
		return st
	}
	limit, st := queryUint(w, r, "limit", 100)
	if st != 0 {
		return st
	}
	if limit < 1 || limit > maxReadLimit {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("limit must be from 1 to %d, got %d", maxReadLimit, limit))
	}
	wait, problem := parseWait(r.URL.Query().Get("wait"))
	if problem != "" {
		return api.Error(w, http.StatusBadRequest, problem)
	}
	ctx := r.Context()
	rs := api.OpenStream(w, r) // the wait may outlast the server's write timeout
	defer rs.Close()
	var wt *waiter
	if wait > 0 {
		wt = a.hub.waiters.AddPoll(outputKey(g))
		defer a.hub.waiters.Remove(outputKey(g), wt)
	}
	deadline := time.Now().Add(wait)
	for {
		out, err := a.readPage(ctx, g, after, int(limit))
		if err != nil {
			return engineError(w, err)
		}
		if len(out.Messages) > 0 || wt == nil || time.Until(deadline) <= 0 || !wt.Wait(ctx, a.done, time.Until(deadline)) {
			if ctx.Err() != nil {
				return 499
			}
			if !out.Found {
				return api.Error(w, http.StatusNotFound, "no group "+api.Quote(g))
			}
			next := after
			if n := len(out.Messages); n > 0 {
				next = out.Messages[n-1].Seq
			}
			err := writeMessages(ctx, rs, w, out.Messages, map[string]any{"position": out.Position, "firstKept": out.FirstKept, "after": next})
			if errors.Is(err, api.ErrStreamBusy) {
				return errBusy(w, err)
			}
			return http.StatusOK
		}
	}
}

// stream serves GET /v1/groups/{group}/output/stream?after=N as
// server-sent events, one per released message with id = seq, so a
// client that reconnects with Last-Event-ID resumes after the last one it
// got (at least once). It waits for a group nobody published to yet.
func (a *API) stream(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	after, st := queryUint(w, r, "after", 0)
	if st != 0 {
		return st
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseUint(id, 10, 63)
		if err != nil {
			return api.Error(w, http.StatusBadRequest, "Last-Event-ID must be a seq this stream sent, got "+api.Quote(id))
		}
		after = max(after, n)
	}
	ctx := r.Context()
	wt := a.hub.waiters.AddStream(outputKey(g))
	if wt == nil {
		api.SetRetryAfter(w, a.hub.waiters.RefusedWait())
		return api.Error(w, http.StatusServiceUnavailable, a.hub.refusedMsg()+" (Retry-After)")
	}
	defer a.hub.waiters.Remove(outputKey(g), wt)
	rs := api.OpenStream(w, r)
	defer rs.Close()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if rs.Write(nil) != nil {
		return http.StatusOK
	}
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	for {
		out, err := a.readPage(ctx, g, after, maxReadLimit)
		if err != nil {
			return http.StatusOK
		}
		if len(out.Messages) > 0 {
			// One page at a time, each reserved from the server's stream
			// budget: a reader that does not keep up holds one page, not
			// the group's output.
			if err := rs.Reserve(ctx, pageCost(out.Messages)); err != nil {
				if errors.Is(err, api.ErrStreamBusy) {
					endEvent(rs, api.EndBusy, after, err.Error()+"; reconnect with Last-Event-ID to resume")
				}
				return http.StatusOK
			}
			if rs.Write(ssePage(out.Messages)) != nil {
				return http.StatusOK
			}
			after = out.Messages[len(out.Messages)-1].Seq
			if after < out.Position {
				continue // more is there already
			}
		}
		select {
		case <-wt.C():
		case <-ping.C:
			if rs.Write([]byte(": ping\n\n")) != nil {
				return http.StatusOK
			}
		case <-ctx.Done():
			return http.StatusOK
		case <-a.done:
			endEvent(rs, api.EndShutdown, after, "the server is shutting down; reconnect with Last-Event-ID to resume")
			return http.StatusOK
		}
	}
}

func (a *API) commit(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	c := r.PathValue("consumer")
	if p := checkName("consumer", c, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	var b struct {
		Position *uint64 `json:"position"`
	}
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if b.Position == nil {
		return api.Error(w, http.StatusBadRequest, "position is required: the last seq the consumer has handled")
	}
	res, st := a.do(r.Context(), w, g, &Commit{Group: g, Consumer: c, Position: *b.Position})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, map[string]any{"consumer": c, "position": *b.Position, "released": res.Position})
}
