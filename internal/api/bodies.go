package api

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
)

// Request bodies held at once. --max-inflight (4096) requests with bodies
// of up to 8 MiB could hold 32 GiB; the body budget bounds what large
// bodies hold together: a request whose body is over SmallBody waits,
// before reading it, until that many bytes of the budget are free, and
// holds them until it is answered. Small bodies are not counted (their
// total is bounded by --max-inflight × SmallBody), so the requests of a
// normal load never wait.
const (
	// DefaultBodyMemory is the budget when --max-body-memory is 0.
	DefaultBodyMemory = 256 << 20
	// SmallBody: bodies up to this size are not counted.
	SmallBody = 64 << 10
	// MaxBodyWait bounds the wait for room, as the server's read timeout
	// bounds reading a body: past it the request is refused (503,
	// UNAVAILABLE), nothing done.
	MaxBodyWait = 30 * time.Second
)

// budget is a count of bytes handed out first come, first served: a
// request that does not fit waits, and a later smaller one does not
// overtake it. The body budget and the streams' buffer (Streams) are
// each one.
//
// While nobody waits, taking and giving back are atomic operations on
// free, without the lock: every gRPC call on --grpc-addr holds its
// message's room while it is read, so a lock here was one that every
// call on every core took twice. The lock orders the waiters. A taker
// without it takes only while queued is 0; a waiter publishes queued
// before it looks at free again, and a giver adds to free before it
// looks at queued, so one of the two always sees the other: no room is
// given back unseen by a waiter.
type budget struct {
	total  int64
	free   atomic.Int64
	queued atomic.Int32  // len(waiting), stored under mu
	peak   atomic.Int64  // the most ever held at once
	waits  atomic.Uint64 // acquires that had to wait
	freed  atomic.Int64  // bytes released since the start: the drain rate (see full)

	mu      sync.Mutex
	waiting []*budgetWaiter
}

// init makes b a budget of total bytes, all free.
func (b *budget) init(total int64) *budget {
	b.total = total
	b.free.Store(total)
	return b
}

// budgetFull is a wait for room that ran out, with the wait its client is
// predicted for a retry (RetryAfter): the bytes queued up to and including
// its own, at the rate bytes were freed while it waited. A retry sooner
// would find the same queue; one fixed pause would bring every refused
// client back together.
type budgetFull struct {
	err  error
	wait time.Duration
}

func (e *budgetFull) Error() string             { return e.err.Error() }
func (e *budgetFull) Unwrap() error             { return e.err }
func (e *budgetFull) RetryAfter() time.Duration { return e.wait }

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

// acquire waits until n bytes are free (n is cut to the total, so one
// request never waits for ever), ctx ends, or maxWait passes (then
// errTimeout). It returns the bytes taken, for release.
func (b *budget) acquire(ctx context.Context, n int64, maxWait time.Duration, errTimeout error) (int64, error) {
	n = min(n, b.total)
	if b.queued.Load() == 0 && b.take(n) {
		return n, nil
	}
	b.mu.Lock()
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiting = append(b.waiting, w)
	b.queued.Store(int32(len(b.waiting)))
	// Room given back before queued was seen is in free: look again (w
	// first in line and room free: it is granted here).
	b.wakeLocked()
	select {
	case <-w.ready:
		b.mu.Unlock()
		return n, nil
	default:
	}
	freed0, start := b.freed.Load(), time.Now()
	b.mu.Unlock()
	b.waits.Add(1)
	t := time.NewTimer(maxWait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errTimeout
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: give it back
		b.free.Add(n)
		b.wakeLocked()
	default:
		queued := int64(0)
		for i, x := range b.waiting {
			queued += x.n
			if x == w {
				b.waiting = append(b.waiting[:i], b.waiting[i+1:]...)
				break
			}
		}
		b.wakeLocked() // a large waiter gone may let smaller ones in
		if err == errTimeout {
			err = &budgetFull{err: err, wait: drainTime(queued, b.freed.Load()-freed0, time.Since(start))}
		}
	}
	return 0, err
}

// drainTime is how long freeing queued bytes takes at the rate of freed
// bytes in elapsed; with nothing freed, at least elapsed again (at most
// MaxSlotRetry).
func drainTime(queued, freed int64, elapsed time.Duration) time.Duration {
	if freed <= 0 {
		return min(elapsed, MaxSlotRetry)
	}
	return min(time.Duration(float64(elapsed)*float64(queued)/float64(freed)), MaxSlotRetry)
}

// release gives back n bytes that acquire took.
func (b *budget) release(n int64) {
	b.free.Add(n)
	b.freed.Add(n)
	if b.queued.Load() != 0 {
		b.mu.Lock()
		b.wakeLocked()
		b.mu.Unlock()
	}
}

// take takes n bytes if they are free.
func (b *budget) take(n int64) bool {
	for {
		f := b.free.Load()
		if f < n {
			return false
		}
		if b.free.CompareAndSwap(f, f-n) {
			held := b.total - (f - n)
			for p := b.peak.Load(); held > p && !b.peak.CompareAndSwap(p, held); p = b.peak.Load() {
			}
			return true
		}
	}
}

// wakeLocked hands room to the waiters in order while the first fits,
// and publishes how many still wait.
func (b *budget) wakeLocked() {
	for len(b.waiting) > 0 && b.take(b.waiting[0].n) {
		w := b.waiting[0]
		b.waiting[0] = nil
		b.waiting = b.waiting[1:]
		close(w.ready)
	}
	b.queued.Store(int32(len(b.waiting)))
}

// Hold waits for n bytes as Acquire does and returns the bytes taken,
// for a caller that gives them back in parts (Give): the grpc-go edge
// holds a message's largest size while grpc-go reads it, then only the
// size it had. A wait that runs out is a gRPC UNAVAILABLE with the
// predicted wait as its retry hint.
func (b *BodyBudget) Hold(ctx context.Context, n int64) (int64, error) {
	n, err := b.acquire(ctx, n, MaxBodyWait, ErrBodyBudget)
	if errors.Is(err, ErrBodyBudget) {
		err = GRPCRetryError(connect.CodeUnavailable, err.Error(), PredictedWait(err))
	}
	return n, err
}

// Give gives back n of the bytes Hold took.
func (b *BodyBudget) Give(n int64) {
	if n > 0 {
		b.release(n)
	}
}

// held is the bytes taken now.
func (b *budget) held() int64 { return b.total - b.free.Load() }

// BodyBudget is the budget of large request bodies.
type BodyBudget struct{ budget }

// NewBodyBudget returns a budget of total bytes.
func NewBodyBudget(total int64) *BodyBudget {
	b := new(BodyBudget)
	b.init(total)
	return b
}

// defaultBodies is the budget of requests served outside a Server (tests,
// tools); each Server has its own, sized from Limits.
var defaultBodies = NewBodyBudget(DefaultBodyMemory)

type bodiesKey struct{}

// withBodies is part of the Server's ConnContext: every request on the
// connection finds the server's body budget in its context.
func withBodies(ctx context.Context, b *BodyBudget) context.Context {
	return context.WithValue(ctx, bodiesKey{}, b)
}

// bodiesOf returns the body budget of the server ctx's request came to.
func bodiesOf(ctx context.Context) *BodyBudget {
	if b, ok := ctx.Value(bodiesKey{}).(*BodyBudget); ok {
		return b
	}
	return defaultBodies
}

// ErrBodyBudget: the wait for room in the budget passed MaxBodyWait.
var ErrBodyBudget = errors.New("the server is holding its limit of request bodies (--max-body-memory); nothing was done, retry after the Retry-After pause")

// Acquire waits until n bytes are free (n is cut to the total, so one
// body never waits for ever), ctx ends, or MaxBodyWait passes. The
// release gives them back once.
func (b *BodyBudget) Acquire(ctx context.Context, n int64) (release func(), err error) {
	n, err = b.acquire(ctx, n, MaxBodyWait, ErrBodyBudget)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { b.release(n) }) }, nil
}

// Held is the bytes held now.
func (b *BodyBudget) Held() int64 { return b.held() }

// HoldBody counts a body of up to n bytes (its declared length, or the
// route's limit when none is declared) against the budget until the
// request is answered, waiting for room first. It answers 503 itself and
// returns its status if the wait ends without room.
func HoldBody(w http.ResponseWriter, r *http.Request, limit int64) int {
	n := limit
	if r.ContentLength >= 0 {
		n = min(r.ContentLength, limit)
	}
	if n <= SmallBody {
		return 0
	}
	release, err := bodiesOf(r.Context()).Acquire(r.Context(), n)
	if err != nil {
		if errors.Is(err, ErrBodyBudget) {
			SetRetryAfter(w, PredictedWait(err))
			return Error(w, http.StatusServiceUnavailable, err.Error())
		}
		return Error(w, http.StatusServiceUnavailable, "request cancelled before its body was read")
	}
	context.AfterFunc(r.Context(), release)
	return 0
}

// HoldGRPCBody is HoldBody for a gRPC, gRPC-Web or Connect call whose
// message is at most limit bytes: the size is the declared length, or
// for enveloped bodies the length in the first message's envelope, read
// before anything else (a stream then holds nothing for a small first
// message however long it lasts). A refused wait ends the call
// UNAVAILABLE. A compressed message (the envelope's flag, or Connect's
// Content-Encoding) holds limit more, for what it inflates to, when
// inflated is set; a long-lived call's first message would hold that
// for the call's life, so its caller leaves it unset.
func HoldGRPCBody(r *http.Request, limit int64, inflated bool) {
	if r.ContentLength >= 0 || !enveloped(r.Header.Get("Content-Type")) {
		n := limit
		if r.ContentLength >= 0 {
			n = min(r.ContentLength, limit)
		}
		if inflated && compressed(r.Header.Get("Content-Encoding")) {
			n += limit
		}
		if n > SmallBody {
			r.Body = &heldBody{ReadCloser: r.Body, r: r, n: n}
		}
		return
	}
	r.Body = &heldBody{ReadCloser: r.Body, r: r, limit: limit, envelope: true, inflated: inflated}
}

// compressed: a Content-Encoding that inflates.
func compressed(encoding string) bool { return encoding != "" && encoding != "identity" }

// enveloped: the body is length-prefixed messages (gRPC, gRPC-Web, and
// Connect's streaming calls), not one bare message (Connect unary).
func enveloped(contentType string) bool {
	return strings.HasPrefix(contentType, "application/grpc") || strings.HasPrefix(contentType, "application/connect+")
}

// heldBody acquires its budget at its first read: n bytes, or with
// envelope the size the first 5 bytes declare.
type heldBody struct {
	io.ReadCloser
	r        *http.Request
	n, limit int64
	envelope bool
	inflated bool // a compressed first message holds limit more
	prefix   []byte
	started  bool
	err      error
}

func (h *heldBody) Read(p []byte) (int, error) {
	if !h.started {
		h.started = true
		h.err = h.start()
	}
	if h.err != nil {
		return 0, h.err
	}
	if len(h.prefix) > 0 {
		n := copy(p, h.prefix)
		h.prefix = h.prefix[n:]
		return n, nil
	}
	return h.ReadCloser.Read(p)
}

func (h *heldBody) start() error {
	if h.envelope {
		var pre [5]byte
		k, err := io.ReadFull(h.ReadCloser, pre[:])
		h.prefix = pre[:k]
		if err != nil {
			return nil // too short for an envelope: the protocol's reader says so
		}
		h.n = min(int64(binary.BigEndian.Uint32(pre[1:]))+5, h.limit)
		if h.inflated && pre[0]&1 != 0 {
			h.n += h.limit
		}
		if h.n <= SmallBody {
			return nil
		}
	}
	release, err := bodiesOf(h.r.Context()).Acquire(h.r.Context(), h.n)
	if err != nil {
		if errors.Is(err, ErrBodyBudget) {
			return GRPCRetryError(connect.CodeUnavailable, err.Error(), PredictedWait(err))
		}
		return err
	}
	context.AfterFunc(h.r.Context(), release)
	return nil
}
