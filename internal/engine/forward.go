package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Forwarded requests are batched per partition. The first request to find
// no batch under way for its partition sends one with itself and whatever
// joined meanwhile; requests arriving while a batch is out wait for the
// next, which a goroutine of the sender sends as soon as the first
// returns. Under load one HTTP call and one gob stream (type descriptions
// sent once) carry many requests; alone, a request goes at once.
const maxForwardBatch = 512

type fwdReq struct {
	kind    byte
	wl      uint8
	payload []byte
	tc      TraceContext // the caller's trace, for the owner's spans
	// Outcome: callErr when the transport failed for the whole batch,
	// else res and err decoded from the owner's answer.
	callErr error
	res     any
	err     error
	done    chan struct{}
}

type forwarder struct {
	mu      sync.Mutex
	pending []*fwdReq
	sending bool
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

// forwardOnce is one attempt at forwarding a request: the owner's answer,
// or the transport's failure.
func (e *Engine) forwardOnce(ctx context.Context, part int, kind byte, wl uint8, payload []byte) (res any, err, callErr error) {
	r := &fwdReq{kind: kind, wl: wl, payload: payload, done: make(chan struct{}, 1)}
	if e.opts.Tracer != nil {
		r.tc, _ = TraceContextOf(ctx)
	}
	start := time.Now()
	if !e.call(ctx, part, r) {
		return nil, nil, ctx.Err()
	}
	if m := e.opts.Metrics; m != nil {
		m.forwardSeconds.Observe(time.Since(start).Seconds())
	}
	return r.res, r.err, r.callErr
}

// call sends r to part's owner with the requests of other callers, and
// returns when r's outcome is known (true) or ctx is done (false: r then
// belongs to the sender, which may still fill it).
func (e *Engine) call(ctx context.Context, part int, r *fwdReq) bool {
	f := &e.fwd[part]
	f.mu.Lock()
	f.pending = append(f.pending, r)
	lead := !f.sending
	f.sending = true
	f.mu.Unlock()
	if lead {
		e.sendForwards(part, true)
	}
	select {
	case <-r.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// sendForwards sends batches of part's pending requests. The leader sends
// one and hands the rest to a goroutine, so that its own caller is not
// held by others' traffic.
func (e *Engine) sendForwards(part int, leader bool) {
	f := &e.fwd[part]
	for {
		f.mu.Lock()
		n := forwardChunk(f.pending)
		if n == 0 {
			f.sending = false
			f.mu.Unlock()
			return
		}
		batch := make([]*fwdReq, n)
		copy(batch, f.pending)
		rest := copy(f.pending, f.pending[n:])
		clear(f.pending[rest:])
		f.pending = f.pending[:rest]
		f.mu.Unlock()
		e.sendBatch(part, batch)
		if leader {
			f.mu.Lock()
			if len(f.pending) > 0 {
				f.mu.Unlock()
				go e.sendForwards(part, false)
				return
			}
			f.sending = false
			f.mu.Unlock()
			return
		}
	}
}

// forwardChunk is how many of the pending requests, at least one if any,
// go in the next batch: at most maxForwardBatch, in a body of at most
// MaxRemoteBytes (forward bounds each request well below it).
func forwardChunk(pending []*fwdReq) int {
	size := remoteHeader + 4
	for i, r := range pending {
		size += fwdWireBytes + len(r.payload)
		if r.tc.Valid() {
			size += traceTrailerBytes
		}
		if i >= maxForwardBatch || i > 0 && size > MaxRemoteBytes {
			return i
		}
	}
	return len(pending)
}

// fwdWireBytes is the fixed part of one request in a forwarded batch.
const fwdWireBytes = 1 + 1 + 4

func (e *Engine) sendBatch(part int, batch []*fwdReq) {
	body := remoteHead(kindBatch, part, 0)
	body = binary.LittleEndian.AppendUint32(body, uint32(len(batch)))
	for _, r := range batch {
		body = append(body, r.kind, r.wl)
		body = binary.LittleEndian.AppendUint32(body, uint32(len(r.payload)))
		body = append(body, r.payload...)
	}
	body = appendForwardTraces(body, batch)
	if m := e.opts.Metrics; m != nil {
		m.forwarded.WithLabelValues("sent").Add(float64(len(batch)))
		m.forwardBatch.Observe(float64(len(batch)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Cluster.ForwardTimeout)
	ans, err := e.opts.Cluster.Transport.Call(ctx, part, body)
	cancel()
	if err == nil {
		err = decodeBatchAnswer(ans, batch)
	}
	for _, r := range batch {
		if err != nil {
			r.callErr = err
		}
		r.done <- struct{}{}
	}
}

// Batch answer: statusOK, count u32, per request a status byte (and for
// statusErr an error code and a u32-length message), then one gob stream
// of the successful requests' wireValues in order.
func decodeBatchAnswer(b []byte, batch []*fwdReq) error {
	if len(b) >= 1 && b[0] == statusErr {
		return decodeErrAnswer(b)
	}
	if len(b) < 5 || b[0] != statusOK || int(binary.LittleEndian.Uint32(b[1:])) != len(batch) {
		return fmt.Errorf("%w: malformed batch answer", ErrOutcomeUnknown)
	}
	b = b[5:]
	ok := make([]*fwdReq, 0, len(batch))
	for _, r := range batch {
		if len(b) < 1 {
			return fmt.Errorf("%w: short batch answer", ErrOutcomeUnknown)
		}
		st := b[0]
		b = b[1:]
		if st == statusOK {
			ok = append(ok, r)
			continue
		}
		if len(b) < 5 {
			return fmt.Errorf("%w: short batch answer", ErrOutcomeUnknown)
		}
		code, n := b[0], int(binary.LittleEndian.Uint32(b[1:]))
		b = b[5:]
		if n > len(b) || code == 0 || int(code) >= len(remoteErrs) {
			return fmt.Errorf("%w: malformed batch answer", ErrOutcomeUnknown)
		}
		r.err = remoteErr(code, string(b[:n]))
		b = b[n:]
	}
	dec := gob.NewDecoder(bytes.NewReader(b))
	for _, r := range ok {
		v, err := decodeWire(dec)
		if err != nil {
			return fmt.Errorf("%w: decoding the answer: %v", ErrOutcomeUnknown, err)
		}
		r.res = v
	}
	return nil
}

// handleBatch answers a batch of forwarded requests: every one enters the
// partition's inbox before any is waited for, so they share the
// partition's batches as a local burst would.
func (e *Engine) handleBatch(ctx context.Context, part int, b []byte) []byte {
	items, err := e.enqueueBatch(ctx, part, b)
	if err != nil {
		return answerErr(err)
	}
	for i := range items {
		it := &items[i]
		if it.r == nil {
			continue
		}
		it.res, it.err = e.await(it.ctx, it.r)
		if errors.Is(it.err, errMoved) {
			it.err = ErrNotOwner
		}
	}
	return encodeBatchAnswer(items)
}

// fwdItem is one request of a forwarded batch at its owner: queued as r,
// or refused with err before it was queued.
type fwdItem struct {
	w   fwdWire // as it came
	r   *Request
	ctx context.Context // the batch's, or with the caller's trace
	res any
	err error
}

var errMalformedBatch = errors.New("engine: malformed forwarded batch")

// enqueueBatch decodes a forwarded batch and queues each of its requests
// in part's inbox, holding subMu so that a Release waits for all of them.
// An error means the batch as a whole is malformed.
func (e *Engine) enqueueBatch(ctx context.Context, part int, b []byte) ([]fwdItem, error) {
	if len(b) < 4 {
		return nil, errMalformedBatch
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > maxForwardBatch {
		return nil, fmt.Errorf("engine: forwarded batch of %d requests (limit %d)", n, maxForwardBatch)
	}
	items := make([]fwdItem, n)
	p := e.parts[part]
	p.subMu.RLock()
	defer p.subMu.RUnlock()
	serving := p.serving.Load() && !p.failed.Load()
	for i := range items {
		if len(b) < 6 {
			return nil, errMalformedBatch
		}
		kind, wl, l := b[0], b[1], int(binary.LittleEndian.Uint32(b[2:]))
		b = b[6:]
		if l > len(b) {
			return nil, errMalformedBatch
		}
		items[i].w = fwdWire{kind: kind, wl: wl, payload: b[:l]}
		b = b[l:]
	}
	if err := readForwardTraces(b, items); err != nil {
		return nil, err
	}
	for i := range items {
		it := &items[i]
		kind, wl, payload := it.w.kind, it.w.wl, it.w.payload
		if _, ok := e.workloads[wl]; !ok {
			it.err = fmt.Errorf("engine: unknown workload %d", wl)
			continue
		}
		if !serving {
			it.err = ErrNotOwner
			continue
		}
		var cmd Command
		var q any
		if cmd, q, it.err = decodeForwarded(kind, payload); it.err != nil {
			continue
		}
		it.ctx = it.w.traced(ctx)
		it.r, it.err = e.enqueue(p, it.ctx, wl, cmd, q)
	}
	p.kickProcessor()
	return items, nil
}

// decodeForwarded is the command or query one forwarded request carries.
func decodeForwarded(kind byte, payload []byte) (Command, any, error) {
	switch kind {
	case kindCommand:
		return rawCommand(payload), nil, nil
	case kindQuery:
		q, err := decodeValue(payload)
		if err != nil {
			return nil, nil, fmt.Errorf("engine: decoding a forwarded query: %w", err)
		}
		return nil, q, nil
	}
	return nil, nil, fmt.Errorf("engine: forwarded request of unknown kind %d", kind)
}

// encodeBatchAnswer writes the answer decodeBatchAnswer reads.
func encodeBatchAnswer(items []fwdItem) []byte {
	out := []byte{statusOK}
	out = binary.LittleEndian.AppendUint32(out, uint32(len(items)))
	for i := range items {
		if err := items[i].err; err != nil {
			code, msg := errCode(err), err.Error()
			out = append(out, statusErr, code)
			out = binary.LittleEndian.AppendUint32(out, uint32(len(msg)))
			out = append(out, msg...)
			continue
		}
		out = append(out, statusOK)
	}
	buf := bytes.NewBuffer(out)
	enc := gob.NewEncoder(buf)
	for i := range items {
		if items[i].err != nil {
			continue
		}
		if err := encodeWire(enc, items[i].res); err != nil {
			// The answer's layout is already written: fail the batch.
			return answerErr(fmt.Errorf("engine: encoding the reply (%T) for another node: %w; the workload must list its reply types in WireTypes", items[i].res, err))
		}
	}
	return buf.Bytes()
}
