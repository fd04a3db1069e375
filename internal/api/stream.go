package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Streams and long polls outlive the server's whole-request timeouts (a
// stream follows its source for as long as the client wants, a long poll
// waits up to its route's maximum), so they cannot be bounded by them.
// What they hold is bounded instead, per answer and over all of them:
//
//   - A page (one long-poll answer, one chunk of a stream) carries at most
//     StreamPageBytes of messages, at least one message; the answer says
//     where to continue.
//   - Rendering a page takes its size from a budget shared by every stream
//     and long poll (Limits.StreamBuffer) until it is written. A page that
//     cannot have it within the stall timeout ends its stream with the
//     reason EndBusy and the position to resume from.
//   - A write that has not completed after the stall timeout
//     (Limits.StallTimeout) ends the stream (EndStalled): its reader has
//     stopped reading. Nothing more can reach such a reader (its socket
//     buffers or its HTTP/2 flow-control window are full), so the
//     connection (HTTP/1.1) or the stream (HTTP/2, RST_STREAM) is cut; the
//     reader resumes from the last position it received.
const (
	// DefaultStallTimeout: a write to a stream's or long poll's reader
	// blocked this long ends it. Longer than any pause a reader that keeps
	// up takes, much shorter than the waits a long poll may have.
	DefaultStallTimeout = 10 * time.Second
	// DefaultStreamBuffer bounds the bytes of pages rendered and not yet
	// written, over every stream and long poll: 256 pages of the largest
	// size. 20 readers that never read each held one 100 MB page before.
	DefaultStreamBuffer = 256 << 20
	// StreamPageBytes bounds the message bytes (payloads and ids) of one
	// page, the per-answer budget: a page holds fewer messages than asked
	// for when they are large, and at least one.
	StreamPageBytes = 1 << 20
)

// Reasons a stream ends that are the server's doing, as the end event or
// error names them and surge_stream_ended_total counts them.
const (
	EndStalled  = "stalled"
	EndBusy     = "server_busy"
	EndShutdown = "shutdown"
)

// ErrStreamBusy says the shared stream buffer stayed full for the stall
// timeout.
var ErrStreamBusy = errors.New("the server's buffer for streams (--stream-buffer) stayed full for the stall timeout (--stall-timeout)")

// Streams is the shared budget of one server's streams and long polls.
type Streams struct {
	stall time.Duration
	buf   budget

	stalled, busy, shutdown atomic.Int64
}

// NewStreams returns a budget of limit bytes with the given stall timeout
// (0 for either: its default).
func NewStreams(stall time.Duration, limit int64) *Streams {
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	if limit <= 0 {
		limit = DefaultStreamBuffer
	}
	s := &Streams{stall: stall}
	s.buf.init(limit)
	return s
}

// defaultStreams serves handlers run outside a Server (tests, tools).
var defaultStreams = NewStreams(0, 0)

type streamsKey struct{}

// withStreams is the Server's ConnContext: every request on the
// connection finds the budget in its context.
func withStreams(ctx context.Context, s *Streams) context.Context {
	return context.WithValue(ctx, streamsKey{}, s)
}

// StreamsOf returns the budget of the server ctx's request came to.
func StreamsOf(ctx context.Context) *Streams {
	if s, ok := ctx.Value(streamsKey{}).(*Streams); ok {
		return s
	}
	return defaultStreams
}

// Buffered is the bytes reserved now; Peak the most ever reserved at once;
// Limit the budget.
func (s *Streams) Buffered() int64 { return s.buf.held() }
func (s *Streams) Peak() int64     { return s.buf.peak.Load() }
func (s *Streams) Limit() int64    { return s.buf.total }

// Ended counts the streams the server ended for reason.
func (s *Streams) Ended(reason string) int64 {
	switch reason {
	case EndStalled:
		return s.stalled.Load()
	case EndBusy:
		return s.busy.Load()
	case EndShutdown:
		return s.shutdown.Load()
	}
	return 0
}

func (s *Streams) register(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_stream_buffered_bytes",
			Help: "Bytes of stream and long-poll pages rendered and not yet written, over all connections.",
		}, func() float64 { return float64(s.Buffered()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_stream_buffer_limit_bytes",
			Help: "Cap on surge_stream_buffered_bytes (--stream-buffer).",
		}, func() float64 { return float64(s.Limit()) }),
	)
	for _, r := range []string{EndStalled, EndBusy, EndShutdown} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "surge_stream_ended_total",
			Help:        "Streams and long polls the server ended: stalled (a write blocked for --stall-timeout), server_busy (--stream-buffer stayed full), shutdown.",
			ConstLabels: prometheus.Labels{"reason": r},
		}, func() float64 { return float64(s.Ended(r)) }))
	}
}

// reserve takes n bytes, waiting up to the stall timeout for them, first
// come, first served. One page larger than the whole budget waits for all
// of it.
func (s *Streams) reserve(ctx context.Context, n int64) (int64, error) {
	n, err := s.buf.acquire(ctx, n, s.stall, ErrStreamBusy)
	if errors.Is(err, ErrStreamBusy) {
		s.busy.Add(1)
	}
	return n, err
}

func (s *Streams) unreserve(n int64) { s.buf.release(n) }

type streamKey struct{}

// WithStream returns ctx carrying st, for a handler that does not see the
// ResponseWriter (a gRPC call's).
func WithStream(ctx context.Context, st *Stream) context.Context {
	return context.WithValue(ctx, streamKey{}, st)
}

// StreamOf returns the Stream WithStream put in ctx, or nil.
func StreamOf(ctx context.Context) *Stream {
	st, _ := ctx.Value(streamKey{}).(*Stream)
	return st
}

// Stream is one stream's or long poll's answer: it lives past the server's
// whole-request timeouts, and its writes are bounded by the stall timeout
// and its pages by the shared budget.
type Stream struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	s        *Streams
	reserved int64
	http1    bool
}

// OpenStream lifts the server's read and write timeouts from r's answer
// (on HTTP/1.1 the connection's deadlines, on HTTP/2 the stream's): the
// handler bounds its life by its route's rules instead. Without it the
// server's 30 s write timeout cut every stream and every long poll that
// waited longer.
func OpenStream(w http.ResponseWriter, r *http.Request) *Stream {
	st := &Stream{w: w, rc: http.NewResponseController(w), s: StreamsOf(r.Context()), http1: r.ProtoMajor == 1}
	_ = st.rc.SetReadDeadline(time.Time{})
	_ = st.rc.SetWriteDeadline(time.Time{})
	return st
}

// Close bounds what the server writes after the handler returns (on
// HTTP/1.1 the end of a chunked body), which the handler's own deadlines
// no longer cover: a reader that stopped reading would hold the
// connection for ever. Handlers defer it.
func (st *Stream) Close() {
	st.Unreserve()
	if st.http1 {
		_ = st.rc.SetWriteDeadline(time.Now().Add(st.s.stall))
	}
}

// Reserve takes n bytes of the shared budget for a page about to be
// rendered, waiting up to the stall timeout (ErrStreamBusy past it). The
// Write of the page, or Unreserve, gives them back.
func (st *Stream) Reserve(ctx context.Context, n int) error {
	got, err := st.s.reserve(ctx, int64(n))
	st.reserved += got
	return err
}

// Unreserve gives back what Reserve took.
func (st *Stream) Unreserve() {
	if st.reserved > 0 {
		st.s.unreserve(st.reserved)
		st.reserved = 0
	}
}

// Write writes p and flushes it, within the stall timeout, then gives
// back the reservation. An error means the answer is broken (the client
// went, or stopped reading: EndStalled is counted) and the handler
// should return.
func (st *Stream) Write(p []byte) error {
	return st.Send(func() error {
		if len(p) > 0 {
			if _, err := st.w.Write(p); err != nil {
				return err
			}
		}
		return st.rc.Flush()
	})
}

// Send runs send, the writes of one page (a gRPC stream's Sends), as
// Write does one write: within the stall timeout, then it gives back the
// reservation.
func (st *Stream) Send(send func() error) error {
	defer st.Unreserve()
	start := time.Now()
	_ = st.rc.SetWriteDeadline(start.Add(st.s.stall))
	if err := send(); err != nil {
		if time.Since(start) >= st.s.stall {
			st.s.stalled.Add(1)
		}
		return err
	}
	// A stream that waits next must not be cut by a deadline meant for
	// this write (on HTTP/2 an expired deadline resets an idle stream).
	_ = st.rc.SetWriteDeadline(time.Time{})
	return nil
}

// Reply sends a whole JSON answer (a long poll's) with Write: the error
// says whether it went out.
func (st *Stream) Reply(status int, body []byte) error {
	h := st.w.Header()
	h["Content-Type"] = hdrJSON
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	st.w.WriteHeader(status)
	return st.Write(body)
}

// Ending counts a stream the server ends for reason; the handler says so
// to its reader if it still can.
func (st *Stream) Ending(reason string) {
	if reason == EndShutdown {
		st.s.shutdown.Add(1)
	}
}
