package engine

import (
	"bytes"
	"encoding/binary"
	"testing"
)

var wireTC = TraceContext{TraceID: [16]byte{1}, SpanID: [8]byte{2}, Flags: 1}

// Mail between nodes: untraced, byte for byte the earlier format; traced,
// the same bytes followed by the trailer, which an earlier build (reading
// count items and stopping) never reaches; this build reads the contexts
// back onto their mail.
func TestMailTraceTrailer(t *testing.T) {
	ms := []mail{{src: 1, seq: 7, prev: 6, workload: 2, data: []byte("abc")}, {ack: true, seq: 3}, {src: 2, seq: 9, workload: 2, data: []byte("d")}}
	plain := encodeMailRequest(4, ms)
	ms[2].tc = &wireTC
	traced := encodeMailRequest(4, ms)
	if !bytes.HasPrefix(traced, plain) || len(traced) != len(plain)+4+traceTrailerBytes {
		t.Fatalf("traced request is not the untraced one plus one trailer entry:\n%x\n%x", plain, traced)
	}
	body := traced[remoteHeader:]
	got := make([]mail, 3)
	if err := readMailTraces(traced[len(plain):], got); err != nil {
		t.Fatal(err)
	}
	if got[0].tc != nil || got[1].tc != nil || got[2].tc == nil || *got[2].tc != wireTC {
		t.Errorf("contexts read back %v %v %v, want only the third's", got[0].tc, got[1].tc, got[2].tc)
	}
	if n := binary.LittleEndian.Uint32(body); n != 3 {
		t.Errorf("count %d", n)
	}
	for _, bad := range [][]byte{{1, 0}, binary.LittleEndian.AppendUint32(nil, 5), append(binary.LittleEndian.AppendUint32(nil, 1), make([]byte, traceTrailerBytes)...)} {
		if err := readMailTraces(bad, make([]mail, 3)); err == nil {
			t.Errorf("trailer %x accepted", bad)
		}
	}
}
