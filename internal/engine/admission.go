package engine

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
)

// Admission.
//
// A partition serves its inbox in order, so what a client feels under
// overload is the time its request waits there, and that is what is bounded,
// not the queue's length (4,096 requests is 40 ms of fast commands but
// seconds of slow ones). Two rules, both for client commands only: queries
// are cheap and read-only, and mail and timers never pass through the inbox
// (they must never be dropped).
//
//  1. At submission, a command is refused at once (ErrOverloaded, the
//     API's 429) if the wait it would see, estimated as the requests
//     already queued times slotNs, is above half of MaxQueueDelay. slotNs
//     is learnt from what the processor measures: every request records
//     the queue length it joined and its wait is measured when it is
//     taken, so per batch slotNs ≈ Σ wait / Σ (queued ahead + 1), smoothed.
//     That includes whatever slows the partition (apply cost, fsync
//     back-pressure, CPU shared with the HTTP layer). The decision uses
//     the current queue length, so it ends the moment the queue drains:
//     no state is left "overloaded" when load stops; and a request that
//     finds a short queue is always admitted, so the estimate keeps
//     being corrected by fresh measurements.
//  2. At the head, a command that waited longer than MaxQueueDelay (the
//     estimate was wrong: a burst, a stall) is answered ErrOverloaded
//     without being applied, so nothing accepted starts later than that.
//     A request whose client has gone (context done) is answered with the
//     context's error and not applied either.
//
// Both rules apply only behind a queue of at least 256 requests.
// Shedding helps by shortening a queue; when few requests wait and they
// still wait long, the partition itself is stalled (a process starved of
// CPU, a slow disk) and refusing a handful would make no one faster, only
// fail callers that sent a moderate load to a busy machine.
//
// Cost: one clock read and a queue-length read at submission, one clock
// read per request taken; the estimate is published once per batch.

// defaultShedMinQueue is the queue length below which nothing is shed by
// delay (Options.shedMinQueue).
const defaultShedMinQueue = 256

// errExpired is ErrOverloaded for a command that waited too long.
var errExpired = fmt.Errorf("%w: the request waited in the queue longer than the limit and was not applied", ErrOverloaded)

// tooBusy says whether a command joining a queue of ahead requests would
// wait longer than the admission target, and the wait it predicts.
func (p *partition) tooBusy(ahead int) (time.Duration, bool) {
	a := p.e.admitNs
	if a <= 0 || ahead < p.e.opts.shedMinQueue {
		return 0, false
	}
	wait := p.waitBehind(ahead)
	return wait, int64(wait) > a
}

// waitBehind is the wait the partition predicts for a request joining
// its inbox behind ahead others, drained at the observed rate.
func (p *partition) waitBehind(ahead int) time.Duration {
	return time.Duration(int64(ahead) * p.slotNs.Load())
}

// overloaded is ErrOverloaded (or errExpired) with the wait the partition
// predicts for a request joining its inbox now, so the API can tell the
// client when to come back (RetryAfter) instead of a fixed pause that
// brings every refused client back at once.
type overloaded struct {
	err  error
	wait time.Duration
}

// Error carries the wait too, so that a node that relays the refusal
// (answerErr) can pass it on: see remoteErr.
func (o *overloaded) Error() string {
	return o.err.Error() + waitMark + o.wait.String() + ")"
}

func (o *overloaded) Unwrap() error { return o.err }

// RetryAfter is the wait the refusal predicts for a retry.
func (o *overloaded) RetryAfter() time.Duration { return o.wait }

// waitMark starts the predicted wait in an overload's message.
const waitMark = " (predicted wait "

// RetryAfter is the wait an ErrOverloaded predicts for a retry (the queue
// it was refused behind, drained at the observed rate), found as a
// RetryAfter method on err or an error it wraps; 0 if err carries no
// prediction.
func RetryAfter(err error) time.Duration {
	var o interface{ RetryAfter() time.Duration }
	if errors.As(err, &o) {
		return o.RetryAfter()
	}
	return 0
}

// waitSample sums one batch's measured waits for the slotNs estimate.
type waitSample struct {
	waitNs, slots int64
}

// admit is called as the processor takes r from the inbox, at mono (the
// engine's monotonic clock, read once for the requests taken together:
// they are taken within a batch's apply time, microseconds, where the
// limits are hundreds of milliseconds; a request queued after the read
// waited none). It records r's wait and answers r itself, returning
// false, if r must not be applied.
func (p *partition) admit(r *Request, s *waitSample, mono int64) bool {
	waited := max(mono-r.enq, 0)
	p.delays.observe(waited)
	s.waitNs += waited
	s.slots += int64(r.ahead) + 1
	var reason int
	switch {
	case r.ctx.Err() != nil:
		r.err, reason = r.ctx.Err(), shedCancelled
	case r.cmd != nil && p.e.maxWaitNs > 0 && waited > p.e.maxWaitNs && r.ahead >= p.e.opts.shedMinQueue:
		r.err, reason = &overloaded{err: errExpired, wait: p.waitBehind(len(p.inbox))}, shedExpired
	default:
		return true
	}
	p.shed(reason)
	r.done <- struct{}{}
	return false
}

// learn folds a batch's waits into slotNs: a moving average that follows
// a change within a few batches.
func (p *partition) learn(s *waitSample) {
	if s.slots == 0 {
		return
	}
	est := s.waitNs / s.slots
	if old := p.slotNs.Load(); old > 0 {
		est = old + (est-old)/4
	}
	p.slotNs.Store(est)
}

func (p *partition) shed(reason int) {
	if m := p.e.opts.Metrics; m != nil {
		m.shed[reason].Inc()
	}
}

// delayHist counts inbox waits in buckets of 50 µs × 2^i. Only the
// partition's processor writes it; the metrics read it at scrape time.
type delayHist struct {
	counts [delayBuckets + 1]atomic.Uint64 // the last is +Inf
	sumNs  atomic.Int64
}

const (
	delayBuckets = 18 // 50 µs .. 6.55 s
	delayBase    = 50_000
)

func delayBound(i int) float64 { return float64(int64(delayBase)<<i) / 1e9 }

func (h *delayHist) observe(ns int64) {
	i := 0
	if ns > 0 {
		i = min(bits.Len64(uint64(ns-1)/delayBase), delayBuckets)
	}
	h.counts[i].Add(1)
	h.sumNs.Add(ns)
}
