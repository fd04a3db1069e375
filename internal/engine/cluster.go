package engine

// Cluster mode.
//
// In cluster mode several nodes share the partitions. Each partition has a
// log of its own (cmdlog.PartitionLog, a Kafka topic partition) and one
// owner at a time: the node that opened the log last, which fenced every
// earlier one. The engine itself stays what it is on one machine (one
// processor per partition, apply then log, effects released when durable);
// cluster mode adds three things at the seam, so that every workload works
// on a cluster without code of its own:
//
//   - Ownership. Partitions start unowned. Acquire restores a partition
//     from its latest snapshot and the log after it, then serves it;
//     Release stops serving it (requests still queued are answered
//     errMoved and go to the new owner), writes a snapshot so the next
//     owner replays little, and closes the log. A log that fails (fenced,
//     broker gone) releases its partition by itself and tells OnLost.
//   - Routing. A request for a partition served elsewhere is encoded
//     (commands with their own AppendBinary, queries and replies with gob)
//     and handed to the Transport, which carries it to the owner's
//     HandleRemote. "Not the owner" answers are retried until the
//     partition has an owner again, within ForwardTimeout; an ambiguous
//     failure of a command (the connection broke after sending) is not
//     retried, since the command may have been applied.
//   - Messages. Cross-partition messages and their acknowledgements to a
//     partition served elsewhere go through the Transport too. Delivery
//     there can fail (the receiver moves, a node dies), so each partition
//     re-sends the messages of its outbox that stay unacknowledged for
//     ResendAfter; receivers drop duplicates by their per-source
//     high-water mark as they do after a crash, so the effect stays
//     exactly once.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Cluster configures cluster mode (Options.Cluster).
type Cluster struct {
	// Transport carries requests and messages to the owners of partitions
	// this node does not serve. Required.
	Transport Transport
	// OnLost is told when a partition's log failed and the engine stopped
	// serving it (err wraps cmdlog.ErrFenced when another node took it
	// over). It runs on its own goroutine.
	OnLost func(part int, err error)
	// ResendAfter is how long a message may stay unacknowledged before its
	// sender sends it again. Default 2 s.
	ResendAfter time.Duration
	// ForwardTimeout bounds how long a request waits for a partition to
	// have an owner (during a failover). Default 15 s.
	ForwardTimeout time.Duration
}

// Transport carries an encoded request to the node that owns a partition.
type Transport interface {
	// Call delivers body to the Engine.HandleRemote of the node that owns
	// part and returns its answer. It returns an error wrapping
	// ErrNotOwner when it knows the request was not delivered (no owner is
	// known, the connection was refused): the engine then retries.
	Call(ctx context.Context, part int, body []byte) ([]byte, error)
	// Broadcast delivers body to the HandleRemote of every other node,
	// best effort (it carries Effects.Notify values, which are hints).
	Broadcast(ctx context.Context, body []byte)
}

// WireTypes is implemented by a Workload whose query and reply values must
// cross between nodes in cluster mode: it lists one value of each concrete
// type that Machine.Query is given or returns and that Effects.Reply is
// given, so that gob can carry them inside an interface.
type WireTypes interface {
	WireTypes() []any
}

var (
	// ErrNotOwner means the partition has no owner reachable from this
	// node right now (a failover is under way): nothing was done; retry.
	ErrNotOwner = errors.New("engine: the partition is moving to another node; nothing was done, retry")
	// ErrOutcomeUnknown means a command was lost on its way in a way that
	// leaves its outcome unknown (the connection to the partition's owner
	// broke after it was sent, or the owner's log failed while writing
	// it): it may or may not have been applied.
	ErrOutcomeUnknown = errors.New("engine: the partition's owner failed while the command was under way; it may or may not have been applied")
	// errMoved answers a request that was queued for a partition this
	// node stopped serving before applying it; submit sends it on.
	errMoved = errors.New("engine: partition released before the request was applied")
)

const (
	defaultResendAfter    = 2 * time.Second
	defaultForwardTimeout = 15 * time.Second
	maxCourierMail        = 1 << 17
	maxCallMail           = 4096 // mails in one call

	// MaxRemoteBytes bounds the body of one request the engine sends
	// to another node (a batch of forwarded requests, a batch of mail):
	// the transport must accept that much. A single command of
	// cmdlog.MaxEntryBytes always fits; batches are split to fit.
	MaxRemoteBytes = 32 << 20
	// maxForwardQueryBytes bounds a query's encoding for another node
	// (queries are small; a huge one is a bug, refused with ErrTooLarge).
	maxForwardQueryBytes = cmdlog.MaxEntryBytes
)

func (e *Engine) clusterMode() bool { return e.opts.Cluster != nil }

// Acquire makes this node serve part: it restores the partition's latest
// snapshot, replays lg from the snapshot's position, re-sends the messages
// the partition sent that are not known to be received, and starts its
// processor. lg must be newly opened (so that earlier owners are fenced).
// On error the partition stays unserved and lg is closed.
func (e *Engine) Acquire(part int, lg cmdlog.PartitionLog) (err error) {
	if !e.clusterMode() {
		return errors.New("engine: Acquire is for cluster mode")
	}
	if part < 0 || part >= len(e.parts) {
		return fmt.Errorf("engine: partition %d out of range [0,%d)", part, len(e.parts))
	}
	p := e.parts[part]
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if p.plog != nil {
		lg.Close()
		return fmt.Errorf("engine: partition %d is already served here", part)
	}
	e.mu.RLock()
	closed := e.closed
	e.mu.RUnlock()
	if closed {
		lg.Close()
		return ErrClosed
	}
	defer func() {
		if err != nil {
			lg.Close()
			p.resetState()
		}
	}()
	start := time.Now()
	pos, data, ok, err := e.opts.Snapshots.Latest(uint32(part))
	if err != nil {
		return fmt.Errorf("engine: reading snapshot of partition %d: %w", part, err)
	}
	if ok {
		if err := p.restoreSnapshot(data); err != nil {
			return err
		}
		p.snapPos.Store(uint64(pos))
		p.lastEnd.Store(uint64(pos))
		p.snapSize.Store(int64(len(data)))
	}
	if logStart := lg.Start(); uint64(pos) < uint64(logStart) {
		have := "it has no snapshot"
		if ok {
			have = fmt.Sprintf("its newest snapshot covers only up to %d", pos)
		}
		return fmt.Errorf("engine: partition %d: the log starts at position %d (older records were deleted by retention) but %s; serving it would lose those records. Keep the log's retention longer than the snapshot interval, and restore the snapshot topic if it was lost",
			part, logStart, have)
	}
	p.markSnapshot(e.now())
	replayed := 0
	err = lg.Replay(pos, func(at cmdlog.Position, en cmdlog.Entry) error {
		p.records++
		p.snapBytes += int64(len(en.Data))
		if err := p.replay(en.Data); err != nil {
			return fmt.Errorf("engine: replaying partition %d at position %d: %w", part, at, err)
		}
		p.lastEnd.Store(uint64(at) + 1)
		replayed++
		return nil
	})
	if err != nil {
		return err
	}
	p.plog = lg
	p.failed.Store(false)
	p.gen.Add(1)
	p.stopCh = make(chan struct{})
	p.stopped = make(chan struct{})
	p.serving.Store(true)
	// Everything it sent that is not known to be received: receivers drop
	// what they already applied.
	for _, s := range slices.Sorted(maps.Keys(p.outbox)) {
		m := p.outbox[s]
		m.sentNs.Store(e.mono())
		e.sendMail(m.target, m.mail(p.id))
	}
	e.wg.Add(1)
	go p.run()
	e.log.Info("partition acquired", "partition", part, "snapshot_pos", uint64(pos), "replayed_records", replayed, "took", time.Since(start).Round(time.Millisecond))
	if m := e.opts.Metrics; m != nil {
		m.owned.WithLabelValues(partLabel(part)).Set(1)
	}
	return nil
}

// Release stops serving part: requests still queued are passed on to the
// new owner, batches already appended finish, a snapshot is written if the
// partition changed since the last one (so the next owner replays little),
// and the log is closed. Releasing a partition not served here does
// nothing.
func (e *Engine) Release(part int) error {
	if !e.clusterMode() || part < 0 || part >= len(e.parts) {
		return nil
	}
	return e.parts[part].release()
}

// Owned lists the partitions this node serves.
func (e *Engine) Owned() []int {
	var out []int
	for _, p := range e.parts {
		if p.serving.Load() {
			out = append(out, p.id)
		}
	}
	return out
}

// Position is how far the partition's state reaches into its log: the
// position just past the last record it applied (0 when not served here).
func (e *Engine) Position(part int) uint64 {
	if !e.Serves(part) {
		return 0
	}
	return e.parts[part].lastEnd.Load()
}

// Serves reports whether this node serves part.
func (e *Engine) Serves(part int) bool {
	return part >= 0 && part < len(e.parts) && e.parts[part].serving.Load()
}

func (p *partition) release() error {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if p.plog == nil {
		return nil
	}
	e := p.e
	p.serving.Store(false)
	// Submitters hold subMu while they put a request in the inbox; once
	// this lock is taken, every request that saw the partition served is
	// in the inbox, and the ones after will not enter it.
	p.subMu.Lock()
	//lint:ignore SA2001 the empty section is the barrier: it waits out every submitter inside.
	p.subMu.Unlock()
	close(p.stopCh)
	<-p.stopped
	// The processor answered what it took; what is still queued was never
	// applied and goes on to the new owner.
	for {
		select {
		case r := <-p.inbox:
			r.err = errMoved
			r.done <- struct{}{}
			continue
		default:
		}
		break
	}
	var err error
	if !p.failed.Load() && p.lastEnd.Load() > p.snapPos.Load() {
		end := cmdlog.Position(p.lastEnd.Load())
		data := p.appendSnapshot(make([]byte, 0, p.snapshotBufSize()))
		if err = e.opts.Snapshots.Write(uint32(p.id), end, data); err != nil {
			e.log.Error("writing the hand-over snapshot failed; the next owner replays from the previous one", "partition", p.id, "err", err)
		}
	}
	if cerr := p.plog.Close(); cerr != nil && err == nil && !p.failed.Load() {
		err = cerr
	}
	p.plog = nil
	p.resetState()
	e.log.Info("partition released", "partition", p.id)
	if m := e.opts.Metrics; m != nil {
		m.owned.WithLabelValues(partLabel(p.id)).Set(0)
	}
	return err
}

// resetState empties the partition: a node that serves it again rebuilds
// it from the snapshot and the log.
func (p *partition) resetState() {
	for wid, w := range p.e.workloads {
		p.machines[wid] = w.NewMachine(p.id)
	}
	p.outSeq = 0
	p.outbox = make(map[uint64]*outMsg)
	p.lastTo = make(map[int]uint64)
	p.hwm = make(map[uint32]uint64)
	p.timers = newTimerTable()
	p.records = 0
	p.markSnapshot(0)
	p.lastEnd.Store(0)
	p.snapPos.Store(0)
	p.mu.Lock()
	p.last = nil
	p.mu.Unlock()
	p.mail.reset()
}

// lost is called on the log's completion goroutine when the partition's
// log failed: its state may now be ahead of the log, so it must stop
// serving at once; releasing waits for the batches in flight, so it runs
// on a goroutine of its own.
func (p *partition) lost(err error) {
	if !p.failed.CompareAndSwap(false, true) {
		return
	}
	p.e.log.Warn("partition log failed; no longer serving the partition", "partition", p.id, "err", err)
	go func() {
		p.release()
		if fn := p.e.opts.Cluster.OnLost; fn != nil {
			fn(p.id, err)
		}
	}()
}

// partitionErr is what a request learns when its partition's log failed
// under it in cluster mode.
func partitionErr(err error) error {
	if errors.Is(err, cmdlog.ErrFenced) {
		// Not appended: the new owner never saw it, so it goes there.
		return errMoved
	}
	return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
}

// sendMail delivers m to partition target: into its mailbox when this
// node serves it, else through the courier. Never blocks.
func (e *Engine) sendMail(target int, m mail) {
	t := e.parts[target]
	if !e.clusterMode() || t.serving.Load() {
		t.mail.push(m)
		return
	}
	e.courier.push(target, m)
}

// resend sends again every message of the outbox that has waited longer
// than ResendAfter for its acknowledgement. On the partition's goroutine.
func (p *partition) resend() {
	now := p.e.mono()
	after := int64(p.e.opts.Cluster.ResendAfter)
	// In seq order: a receiver takes a source's messages only in order.
	for _, s := range slices.Sorted(maps.Keys(p.outbox)) {
		m := p.outbox[s]
		if !m.durable.Load() || now-m.sentNs.Load() < after {
			continue
		}
		m.sentNs.Store(now)
		p.e.sendMail(m.target, m.mail(p.id))
	}
}

// courier carries mail for partitions served elsewhere. Lost mail is
// harmless (senders re-send), so it never retries and drops what exceeds
// its limit rather than grow.
type courier struct {
	e      *Engine
	mu     sync.Mutex
	queued map[int][]mail
	n      int
	notes  []remoteNote
	signal chan struct{}
	done   chan struct{}
}

func (c *courier) push(target int, m mail) {
	c.mu.Lock()
	if c.n >= maxCourierMail {
		c.mu.Unlock()
		return
	}
	c.queued[target] = append(c.queued[target], m)
	c.n++
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

type remoteNote struct {
	Part     int
	Workload uint8
	V        any
}

// pushNote queues a note for the other nodes, whose observers (long
// polls, worker streams) may wait for this partition too.
func (c *courier) pushNote(part int, wl uint8, v any) {
	c.mu.Lock()
	if len(c.notes) >= maxCourierMail {
		c.mu.Unlock()
		return
	}
	c.notes = append(c.notes, remoteNote{part, wl, v})
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

func (c *courier) run(stop <-chan struct{}) {
	defer close(c.done)
	for {
		select {
		case <-stop:
			return
		case <-c.signal:
		}
		c.mu.Lock()
		q := c.queued
		c.queued = make(map[int][]mail, len(q))
		c.n = 0
		notes := c.notes
		c.notes = nil
		c.mu.Unlock()
		var wg sync.WaitGroup
		if len(notes) > 0 {
			wg.Go(func() {
				body, err := encodeValue(remoteHead(kindNotes, 0, 0), notes)
				if err != nil {
					c.e.log.Error("encoding notes for other nodes failed; the workload must list their types in WireTypes", "err", err)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c.e.opts.Cluster.Transport.Broadcast(ctx, body)
			})
		}
		for target, ms := range q {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				for len(ms) > 0 {
					n := mailChunk(ms)
					body := encodeMailRequest(target, ms[:n])
					if _, err := c.e.opts.Cluster.Transport.Call(ctx, target, body); err != nil {
						c.e.log.Debug("delivering messages to another node failed; their senders will send them again", "partition", target, "err", err)
						return
					}
					ms = ms[n:]
				}
			})
		}
		wg.Wait()
	}
}

// Remote requests.
//
//	[0] version (1)   [1] kind   [2:6] partition   [6] workload
//	kindBatch:   forwarded commands and queries (forward.go), each a
//	             kindCommand (its AppendBinary) or a kindQuery (gob of
//	             wireValue{query})
//	kindMail:    count u32, then per mail: ack u8, src u32, seq u64,
//	             prev u64, workload u8, len u32, data
//
// Answers: [0] status; statusOK then what the kind answers; statusErr
// then an error code byte and the message.
const (
	remoteVersion = 1
	kindCommand   = 1 // in a batch only
	kindQuery     = 2 // in a batch only
	kindMail      = 3
	kindNotes     = 4 // gob of []remoteNote
	kindBatch     = 5 // count u32, then per request kind u8, workload u8, len u32, payload (forward.go)
	remoteHeader  = 7

	statusOK  = 0
	statusErr = 1
)

// Error codes on the wire, so that the caller's errors.Is sees the same
// sentinel the owner returned.
// New codes are appended: a node reads an unknown one as a malformed
// answer.
var remoteErrs = []error{nil, ErrNotOwner, ErrOverloaded, ErrClosed, ErrFailed, ErrUndecodable, ErrApplyPanicked, context.Canceled, context.DeadlineExceeded, ErrOutcomeUnknown, ErrTooLarge}

// codeOutcomeUnknown is what any other error is sent as.
const codeOutcomeUnknown = 9

// wireValue carries a query, reply or note inside an interface. gob
// cannot carry a nil pointer, slice or map, nor a struct without exported
// fields (empty queries), inside an interface; those travel as the name
// of their type and come back as its zero value.
type wireValue struct {
	V    any
	Zero string
}

// wireTypes maps the names used in wireValue.Zero to types; filled by
// registerWireTypes before any engine serves.
var wireTypes sync.Map // string → reflect.Type

func wireName(t reflect.Type) string { return t.String() }

func registerWire(v any) {
	t := reflect.TypeOf(v)
	if t == nil {
		return
	}
	wireTypes.Store(wireName(t), t)
	// gob can carry every type but a struct without exported fields (a
	// nil sample still registers its type).
	if t.Kind() != reflect.Struct || !zeroOnWire(reflect.ValueOf(v)) {
		gob.Register(v)
	}
}

// zeroOnWire says whether v must travel as the name of its type.
func zeroOnWire(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		return v.IsNil()
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				return false
			}
		}
		return true
	}
	return false
}

type remoteError struct {
	sentinel error
	msg      string
	wait     time.Duration // an overload's predicted wait
}

// RetryAfter is a relayed overload's predicted wait (see RetryAfter).
func (r *remoteError) RetryAfter() time.Duration { return r.wait }

func (r *remoteError) Error() string { return r.msg }
func (r *remoteError) Unwrap() error { return r.sentinel }

// rawCommand is a command forwarded by another node: already encoded.
type rawCommand []byte

func (c rawCommand) AppendBinary(dst []byte) ([]byte, error) { return append(dst, c...), nil }

func remoteHead(kind byte, part int, wl uint8) []byte {
	b := make([]byte, remoteHeader, 64)
	b[0], b[1] = remoteVersion, kind
	binary.LittleEndian.PutUint32(b[2:], uint32(part))
	b[6] = wl
	return b
}

// mailChunk is how many of ms, at least one, go in one call: at most
// maxCallMail, in at most MaxRemoteBytes (every message is bounded by
// Effects.Send, far below it).
func mailChunk(ms []mail) int {
	size := remoteHeader + 4
	for i := range ms {
		size += mailWireBytes + len(ms[i].data)
		if i >= maxCallMail || i > 0 && size > MaxRemoteBytes {
			return i
		}
	}
	return len(ms)
}

// mailWireBytes is the fixed part of one mail in a kindMail request.
const mailWireBytes = 1 + 4 + 8 + 8 + 1 + 4

func encodeMailRequest(target int, ms []mail) []byte {
	b := remoteHead(kindMail, target, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ms)))
	for _, m := range ms {
		ack := byte(0)
		if m.ack {
			ack = 1
		}
		b = append(b, ack)
		b = binary.LittleEndian.AppendUint32(b, m.src)
		b = binary.LittleEndian.AppendUint64(b, m.seq)
		b = binary.LittleEndian.AppendUint64(b, m.prev)
		b = append(b, m.workload)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.data)))
		b = append(b, m.data...)
	}
	return b
}

func encodeValue(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	if err := encodeWire(gob.NewEncoder(buf), v); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}

func encodeWire(enc *gob.Encoder, v any) error {
	w := wireValue{V: v}
	if rv := reflect.ValueOf(v); rv.IsValid() && zeroOnWire(rv) {
		name := wireName(rv.Type())
		if _, ok := wireTypes.Load(name); !ok {
			return fmt.Errorf("type %s is not registered", name)
		}
		w = wireValue{Zero: name}
	}
	return enc.Encode(w)
}

func decodeValue(b []byte) (any, error) {
	return decodeWire(gob.NewDecoder(bytes.NewReader(b)))
}

func decodeWire(dec *gob.Decoder) (any, error) {
	var w wireValue
	if err := dec.Decode(&w); err != nil {
		return nil, err
	}
	if w.Zero != "" {
		t, ok := wireTypes.Load(w.Zero)
		if !ok {
			return nil, fmt.Errorf("type %s is not registered", w.Zero)
		}
		return reflect.Zero(t.(reflect.Type)).Interface(), nil
	}
	return w.V, nil
}

func answerErr(err error) []byte {
	return append([]byte{statusErr, errCode(err)}, err.Error()...)
}

// errCode is err's index in remoteErrs; anything else is sent as
// ErrOutcomeUnknown.
func errCode(err error) byte {
	for i, s := range remoteErrs {
		if s != nil && errors.Is(err, s) {
			return byte(i)
		}
	}
	return codeOutcomeUnknown
}

// decodeErrAnswer reads a statusErr answer.
func decodeErrAnswer(b []byte) error {
	if len(b) < 2 || b[0] != statusErr || int(b[1]) >= len(remoteErrs) || b[1] == 0 {
		return fmt.Errorf("%w: malformed error answer", ErrOutcomeUnknown)
	}
	return remoteErr(b[1], string(b[2:]))
}

// remoteErr is the error a node answered: its sentinel and message, and
// for an overload the wait its message predicts (see overloaded.Error),
// so a relayed refusal still tells the client when to come back.
func remoteErr(code byte, msg string) error {
	e := &remoteError{sentinel: remoteErrs[code], msg: msg}
	if e.sentinel != ErrOverloaded {
		return e
	}
	if i := strings.LastIndex(msg, waitMark); i >= 0 && strings.HasSuffix(msg, ")") {
		if d, err := time.ParseDuration(msg[i+len(waitMark) : len(msg)-1]); err == nil && d > 0 {
			e.wait = d
		}
	}
	return e
}

// HandleRemote answers a request another node's engine forwarded here
// (through its Transport). It never panics on malformed input: it answers
// with an error.
func (e *Engine) HandleRemote(ctx context.Context, body []byte) []byte {
	if !e.clusterMode() {
		return answerErr(errors.New("engine: this node is not in cluster mode"))
	}
	if len(body) < remoteHeader || body[0] != remoteVersion {
		return answerErr(errors.New("engine: malformed forwarded request"))
	}
	kind, part := body[1], int(binary.LittleEndian.Uint32(body[2:]))
	if part >= len(e.parts) {
		return answerErr(fmt.Errorf("engine: forwarded request for partition %d of %d", part, len(e.parts)))
	}
	payload := body[remoteHeader:]
	switch kind {
	case kindBatch:
		return e.handleBatch(ctx, part, payload)
	case kindMail:
		if err := e.receiveMail(part, payload); err != nil {
			return answerErr(err)
		}
		return []byte{statusOK}
	case kindNotes:
		v, err := decodeValue(payload)
		notes, ok := v.([]remoteNote)
		if err != nil || !ok {
			return answerErr(fmt.Errorf("engine: malformed forwarded notes: %v", err))
		}
		if fn := e.opts.Notify; fn != nil {
			for _, n := range notes {
				if n.Part >= 0 && n.Part < len(e.parts) {
					fn(n.Part, n.Workload, n.V)
				}
			}
		}
		return []byte{statusOK}
	}
	return answerErr(fmt.Errorf("engine: forwarded request of unknown kind %d", kind))
}

func (e *Engine) receiveMail(part int, b []byte) error {
	if len(b) < 4 {
		return errors.New("engine: malformed forwarded mail")
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	t := e.parts[part]
	ms := make([]mail, 0, min(n, 4096))
	for range n {
		if len(b) < 26 {
			return errors.New("engine: malformed forwarded mail")
		}
		m := mail{ack: b[0] == 1, src: binary.LittleEndian.Uint32(b[1:]), seq: binary.LittleEndian.Uint64(b[5:]),
			prev: binary.LittleEndian.Uint64(b[13:]), workload: b[21]}
		l := int(binary.LittleEndian.Uint32(b[22:]))
		b = b[26:]
		if l > len(b) {
			return errors.New("engine: malformed forwarded mail")
		}
		m.data = bytes.Clone(b[:l])
		b = b[l:]
		if int(m.src) >= len(e.parts) {
			return fmt.Errorf("engine: forwarded mail from partition %d of %d", m.src, len(e.parts))
		}
		ms = append(ms, m)
	}
	if !t.serving.Load() {
		// Not here (any more): the senders send it again to the owner.
		return ErrNotOwner
	}
	for _, m := range ms {
		t.mail.push(m)
	}
	return nil
}

// forward sends a request for a partition served elsewhere to its owner,
// retrying while the partition has no owner, and serves it here if this
// node acquires it meanwhile.
func (e *Engine) forward(ctx context.Context, part int, wl uint8, cmd Command, q any) (any, error) {
	kind := byte(kindCommand)
	var payload []byte
	var err error
	if cmd != nil {
		if payload, err = cmd.AppendBinary(nil); err != nil {
			return nil, fmt.Errorf("engine: encoding command: %w", err)
		}
		// The owner would refuse it the same way: refusing it here keeps
		// every forwarded request within what a call carries.
		if n := envHeader + len(payload); n > cmdlog.MaxEntryBytes {
			return nil, tooLarge("command", n)
		}
	} else {
		kind = kindQuery
		if payload, err = encodeValue(nil, q); err != nil {
			return nil, fmt.Errorf("engine: encoding the query (%T) for another node: %w; the workload must list its query types in WireTypes", q, err)
		}
		if len(payload) > maxForwardQueryBytes {
			return nil, fmt.Errorf("%w: the query encodes to %d bytes for another node; the limit is %d", ErrTooLarge, len(payload), maxForwardQueryBytes)
		}
	}
	deadline := time.Now().Add(e.opts.Cluster.ForwardTimeout)
	pause := 10 * time.Millisecond
	for {
		if e.parts[part].serving.Load() {
			res, err := e.submitLocal(ctx, part, wl, cmd, q)
			if !errors.Is(err, errMoved) {
				return res, err
			}
		} else {
			res, err, callErr := e.forwardOnce(ctx, part, kind, wl, payload)
			switch {
			case callErr == nil && !errors.Is(err, ErrNotOwner):
				return res, err
			case callErr != nil && ctx.Err() != nil:
				return nil, ctx.Err()
			case callErr != nil && !errors.Is(callErr, ErrNotOwner) && cmd != nil:
				return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, callErr)
			}
			// Not delivered, or not the owner: retry. (A query changes
			// nothing, so asking again after any failure is safe.)
		}
		if e.isClosed() {
			return nil, ErrClosed
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (partition %d has had no reachable owner for %v)", ErrNotOwner, part, e.opts.Cluster.ForwardTimeout)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 250*time.Millisecond)
		if m := e.opts.Metrics; m != nil {
			m.forwarded.WithLabelValues("retry").Inc()
		}
	}
}

// closeCluster releases every partition served here (each writes its
// hand-over snapshot) and stops the courier and the snapshotter.
func (e *Engine) closeCluster() error {
	errs := make([]error, len(e.parts))
	var wg sync.WaitGroup
	for i, p := range e.parts {
		wg.Go(func() { errs[i] = p.release() })
	}
	wg.Wait()
	close(e.stop)
	<-e.courier.done
	e.wg.Wait()
	close(e.snapCh)
	e.snapWG.Wait()
	return errors.Join(errs...)
}

func (e *Engine) isClosed() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.closed
}

// CheckWireTypes reports the values listed by w.WireTypes that would not
// cross nodes whole: gob leaves out unexported struct fields silently (a
// reply would arrive with them zero), and cannot carry functions or
// channels. Workloads call it from a test.
func CheckWireTypes(w WireTypes) error {
	var errs []error
	for _, v := range w.WireTypes() {
		if v == nil {
			errs = append(errs, errors.New("nil listed in WireTypes"))
			continue
		}
		if err := checkWireType(reflect.TypeOf(v), reflect.TypeOf(v).String(), map[reflect.Type]bool{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var (
	gobEncoderType    = reflect.TypeFor[gob.GobEncoder]()
	binaryMarshalType = reflect.TypeFor[interface{ MarshalBinary() ([]byte, error) }]()
)

func checkWireType(t reflect.Type, path string, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	if t.Implements(gobEncoderType) || t.Implements(binaryMarshalType) ||
		reflect.PointerTo(t).Implements(gobEncoderType) || reflect.PointerTo(t).Implements(binaryMarshalType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return checkWireType(t.Elem(), path, seen)
	case reflect.Map:
		if err := checkWireType(t.Key(), path, seen); err != nil {
			return err
		}
		return checkWireType(t.Elem(), path, seen)
	case reflect.Struct:
		var errs []error
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				errs = append(errs, fmt.Errorf("%s: field %s.%s is unexported; gob leaves it out", path, t, f.Name))
				continue
			}
			if err := checkWireType(f.Type, path+"."+f.Name, seen); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return fmt.Errorf("%s: a %s cannot cross nodes", path, t)
	}
	return nil
}

func registerWireTypes(ws map[uint8]Workload) {
	registerWire([]remoteNote{})
	for _, w := range ws {
		if wt, ok := w.(WireTypes); ok {
			for _, v := range wt.WireTypes() {
				registerWire(v)
				// Its nil pointer too, which queries answer for "not found".
				if t := reflect.TypeOf(v); t.Kind() == reflect.Pointer {
					wireTypes.Store(wireName(t), t)
				}
			}
		}
	}
}
