package jobs

import "github.com/surge-run/surge/internal/wire"

// In cluster mode replies cross between nodes by gob, which carries only
// exported fields. A queue's counts by status and a job's purge time cross
// too; its ready heaps, order and idempotency keys, and a job's heap
// position, are the owning partition's bookkeeping (copyQueue and viewJob
// leave them out as well).

type queueFields Queue // the exported fields, without the methods

type queueWire struct {
	Q      queueFields
	Counts [numStatuses]int64
	Jobs   int
}

// GobEncode implements gob.GobEncoder.
func (q *Queue) GobEncode() ([]byte, error) {
	return wire.GobBytes(queueWire{queueFields(*q), q.counts, q.jobs})
}

// GobDecode implements gob.GobDecoder.
func (q *Queue) GobDecode(b []byte) error {
	var w queueWire
	if err := wire.FromGob(b, &w); err != nil {
		return err
	}
	*q = Queue(w.Q)
	q.counts, q.jobs = w.Counts, w.Jobs
	return nil
}

type jobFields Job

type jobWire struct {
	J       jobFields
	PurgeAt int64
}

// GobEncode implements gob.GobEncoder.
func (j *Job) GobEncode() ([]byte, error) { return wire.GobBytes(jobWire{jobFields(*j), j.purgeAt}) }

// GobDecode implements gob.GobDecoder.
func (j *Job) GobDecode(b []byte) error {
	var w jobWire
	if err := wire.FromGob(b, &w); err != nil {
		return err
	}
	*j = Job(w.J)
	j.purgeAt, j.heapIdx = w.PurgeAt, -1
	return nil
}
