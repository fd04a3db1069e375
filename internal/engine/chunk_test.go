package engine

import (
	"testing"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Calls to another node are split so that each body stays within
// MaxRemoteBytes (one request always goes, however large), and within
// the count limits the receiver checks.
func TestCallsAreSplitByBytesAndCount(t *testing.T) {
	big := make([]byte, cmdlog.MaxEntryBytes-msgHeader)
	ms := make([]mail, 8)
	for i := range ms {
		ms[i].data = big
	}
	for len(ms) > 0 {
		n := mailChunk(ms)
		if n < 1 {
			t.Fatal("no mail taken")
		}
		if body := len(encodeMailRequest(0, ms[:n])); body > MaxRemoteBytes {
			t.Fatalf("a mail call of %d bytes; the bound is %d", body, MaxRemoteBytes)
		}
		ms = ms[n:]
	}
	if n := mailChunk(make([]mail, maxCallMail+10)); n != maxCallMail {
		t.Fatalf("%d small mails in one call, want %d", n, maxCallMail)
	}

	reqs := make([]*fwdReq, 8)
	for i := range reqs {
		reqs[i] = &fwdReq{payload: big}
	}
	if n := forwardChunk(reqs); n < 1 || n == len(reqs) {
		t.Fatalf("forwardChunk took %d of %d requests of %d bytes", n, len(reqs), len(big))
	}
	if n := forwardChunk(reqs[:1]); n != 1 {
		t.Fatalf("a single request: %d", n)
	}
	small := make([]*fwdReq, maxForwardBatch+10)
	for i := range small {
		small[i] = &fwdReq{}
	}
	if n := forwardChunk(small); n != maxForwardBatch {
		t.Fatalf("%d small requests in one batch, want %d", n, maxForwardBatch)
	}
}

// A batch takes mail and due timers only while their records fit the
// bytes left; acknowledgements cost nothing.
func TestMailAndTimersTakenWithinBytes(t *testing.T) {
	var mb mailbox
	mb.signal = make(chan struct{}, 1)
	mb.push(mail{data: make([]byte, 100)})
	mb.push(mail{ack: true})
	mb.push(mail{data: make([]byte, 100)})
	got := mb.take(nil, 10, 2*(msgHeader+100)-1)
	if len(got) != 2 || !got[1].ack {
		t.Fatalf("took %d mails, want the first message and the ack", len(got))
	}
	if mb.len() != 1 {
		t.Fatalf("%d left, want 1", mb.len())
	}

	tt := newTimerTable()
	for _, id := range []string{"a", "b", "c"} {
		tt.set(1, id, 5, nil)
	}
	keys := tt.popDue(10, nil, 10, 2*timerRecordBytes("a"))
	if len(keys) != 2 {
		t.Fatalf("popped %d timers, want 2", len(keys))
	}
	if keys = tt.popDue(10, nil, 10, 1<<20); len(keys) != 1 {
		t.Fatalf("then %d, want the last one", len(keys))
	}
}
