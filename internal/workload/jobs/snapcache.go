package jobs

import (
	"encoding/binary"

	"github.com/surge-run/surge/internal/wire"
)

// A pending job's snapshot encoding, kept between snapshots.
//
// A fork (ForkSnapshot) copies every live job's struct so the snapshot
// can be encoded off the partition's goroutine while the partition goes
// on changing the live job. A pile of PENDING jobs that no worker takes
// (the peer's unary benchmark leaves 100,000) was thus copied, 304 bytes
// with the collector's write barriers each, and encoded again at every
// snapshot: about a tenth of the server's CPU in that run. A pending job
// no worker has held changes in few fields, so a fork encodes such a job
// once, keeps the bytes with it, and a later fork takes them as they are
// while those fields still hold what they held then. The bytes are never
// written again, so any number of forks may share them.
//
// Whether the cache is still right is decided by comparing values, not
// by every change remembering to drop it: a job qualifies only while
// pristine (every field a worker, a failure or a cancel sets is still
// zero, snapPristine), the fields that stay the same for its whole life
// (its id, queue, payload, creation time, idempotency key and sequence)
// are not compared, and every other encoded field is in its print
// (appendSnapPrint), compared at each fork. TestSnapCacheCoversEveryField fails when Job
// gains a field that is in none of the three.

// snapCacheMaxPayload: a larger payload is not worth storing twice.
const snapCacheMaxPayload = 512

// snapPrintLen is the length of a job's print (appendSnapPrint).
const snapPrintLen = 2*4 + 6*8 + 1

// snapPristine is whether j may have a cached encoding: PENDING, and
// nothing a lease, a report, a failure, a retry or a cancel sets.
func (j *Job) snapPristine() bool {
	return j.Status == Pending && j.RetryCount == 0 && j.StartedAt == 0 && j.CompletedAt == 0 &&
		j.LeaseUntil == 0 && !j.CancelAsked && j.Worker == "" && j.Session == "" &&
		len(j.Result) == 0 && j.Error == "" && j.DeadReason == "" && len(j.Payload) <= snapCacheMaxPayload
}

// appendSnapPrint appends the values of j's encoded fields that may
// change while it is pristine. nextEvent counts every event recorded,
// so it stands for the events.
func (j *Job) appendSnapPrint(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(j.Priority))
	b = binary.LittleEndian.AppendUint32(b, uint32(j.MaxRetries))
	for _, v := range [...]int64{j.NotBefore, j.TTLNs, j.TTLFrom, j.RetentionNs, j.nextEvent, j.purgeAt} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	in := byte(0)
	if j.heapIdx >= 0 {
		in = 1
	}
	return append(b, in)
}

// snapEncoding returns j's snapshot encoding for a fork: the cached one
// if j is as it was when it was made, else one made and cached now; nil
// if j is not pristine (the fork copies it instead).
func (j *Job) snapEncoding() []byte {
	if !j.snapPristine() {
		j.snap = nil
		return nil
	}
	var p [snapPrintLen]byte
	print := j.appendSnapPrint(p[:0])
	if len(j.snap) >= snapPrintLen && string(j.snap[:snapPrintLen]) == string(print) {
		return j.snap[snapPrintLen:]
	}
	w := wire.Writer{B: make([]byte, 0, snapPrintLen+j.snapshotBytes())}
	w.B = append(w.B, print...)
	j.code(&wire.Coder{W: &w, Version: snapshotVersion})
	j.snap = w.B
	return j.snap[snapPrintLen:]
}
