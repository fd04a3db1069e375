package engine

import (
	"context"
	"encoding/binary"
	"errors"
)

// Trace contexts between nodes. A kindMail or kindBatch request whose
// mail or requests are traced ends with a trailer after its last item:
//
//	count u32, then per traced item: index u32, TraceContextBytes
//
// A node of an earlier build stops reading after the last item, so it
// ignores the trailer; a request without traced items has none, and is
// byte for byte what an earlier build sends.

// traceTrailerBytes is what one traced item adds to a request.
const traceTrailerBytes = 4 + TraceContextBytes

var errMalformedTraces = errors.New("engine: malformed trace contexts in a forwarded request")

func appendTraceTrailer(b []byte, n int, tcOf func(i int) *TraceContext) []byte {
	count := 0
	for i := range n {
		if tcOf(i) != nil {
			count++
		}
	}
	if count == 0 {
		return b
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(count))
	for i := range n {
		if tc := tcOf(i); tc != nil {
			b = binary.LittleEndian.AppendUint32(b, uint32(i))
			b, _ = tc.AppendBinary(b)
		}
	}
	return b
}

// readTraceTrailer calls set for each context of the trailer b (empty: no
// trailer).
func readTraceTrailer(b []byte, n int, set func(i int, tc TraceContext)) error {
	if len(b) == 0 {
		return nil
	}
	if len(b) < 4 {
		return errMalformedTraces
	}
	count := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if count > n || len(b) != count*traceTrailerBytes {
		return errMalformedTraces
	}
	for range count {
		i := int(binary.LittleEndian.Uint32(b))
		tc, ok := ParseTraceContext(b[4:traceTrailerBytes])
		if i >= n || !ok {
			return errMalformedTraces
		}
		set(i, tc)
		b = b[traceTrailerBytes:]
	}
	return nil
}

func appendMailTraces(b []byte, ms []mail) []byte {
	return appendTraceTrailer(b, len(ms), func(i int) *TraceContext { return ms[i].tc })
}

func readMailTraces(b []byte, ms []mail) error {
	return readTraceTrailer(b, len(ms), func(i int, tc TraceContext) { ms[i].tc = &tc })
}

func appendForwardTraces(b []byte, batch []*fwdReq) []byte {
	return appendTraceTrailer(b, len(batch), func(i int) *TraceContext {
		if !batch[i].tc.Valid() {
			return nil
		}
		return &batch[i].tc
	})
}

// fwdWire is one request of a forwarded batch as read at its owner.
type fwdWire struct {
	kind    byte
	wl      uint8
	payload []byte
	tc      TraceContext
}

func readForwardTraces(b []byte, items []fwdItem) error {
	return readTraceTrailer(b, len(items), func(i int, tc TraceContext) { items[i].w.tc = tc })
}

// traced is ctx carrying the caller's trace, so that the owner's spans of
// the request are children of the forwarding node's.
func (f *fwdWire) traced(ctx context.Context) context.Context {
	if !f.tc.Valid() {
		return ctx
	}
	return WithTraceContext(ctx, f.tc)
}
