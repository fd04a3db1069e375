package jobs

import (
	"encoding/binary"

	"github.com/surge-run/surge/internal/ids"
	"github.com/surge-run/surge/internal/wire"
)

// Ended jobs (DONE and DEAD_LETTERED) are kept as records, not structs.
//
// A partition keeps every finished job for its retention (24 h by
// default), so after a busy while nearly all of its jobs are ended ones:
// 130,000 after ten seconds of the jobs bench's end-to-end run. As *Job
// structs (the job, its id, payload and event array: four objects and
// some thirty pointer words each) they were most of what the collector
// had to mark, its cycles took 60–110 ms on two cores, and each one
// showed as a spike of submit→start latency past 50 ms.
//
// An ended job does not change until it is purged or retried, so the
// partition keeps it as its snapshot encoding, appended to large byte
// chunks, and finds it through an index whose keys and values hold no
// pointers (job ids are UUIDs: the key is their 16 bytes). The collector
// sees a few chunks instead of objects per job; a snapshot copies a
// record as it is; a fork shares the chunks, because a record is never
// written again once stored (appends go past what a fork can read).
// Chunks whose records were mostly purged are compacted, so memory
// follows what is kept.
//
// A retried dead-lettered job is decoded back into a *Job; every reader
// of an ended job gets a decoded copy.

// endedChunkBytes is the size of a chunk; a larger record gets a chunk
// of its own.
const endedChunkBytes = 256 << 10

// recLoc is where a record lies: chunk, offset and length.
type recLoc struct{ chunk, off, n uint32 }

// endedEntry is the index's entry for an ended job.
type endedEntry struct {
	loc     recLoc
	seq     uint64
	purgeAt int64
	status  Status
}

type endedChunk struct {
	b    []byte // records, each preceded by its length; never rewritten
	live int    // bytes of the records the index still points at
}

// sparse: under a quarter of what the chunk holds is live. Measured
// against its capacity, not the bytes written: a record too large for
// the rest of the current chunk retires it however little it holds, and
// such a chunk must be compacted too.
func (c *endedChunk) sparse() bool { return c.live*4 < cap(c.b) }

// jobKey is a job id the collector need not look into: a UUID in its
// canonical form (every id NewJobID draws) as its 16 bytes, any other
// id (tests, logs of builds that took other ids) as it is.
type jobKey struct {
	uuid  ids.UUID
	other string
}

func keyOf(id string) jobKey {
	if u, ok := ids.ParseLower(id); ok {
		return jobKey{uuid: u}
	}
	return jobKey{other: id}
}

func (k jobKey) id() string {
	if k.other != "" {
		return k.other
	}
	return k.uuid.String()
}

// endedJobs is a partition's store of ended jobs.
type endedJobs struct {
	chunks  []*endedChunk // nil: a freed slot
	free    []uint32      // freed slots
	cur     int           // the chunk appended to; -1: none
	byUUID  map[ids.UUID]endedEntry
	byOther map[string]endedEntry
	// sparse: chunks whose live bytes fell under a quarter, to compact.
	sparse []uint32
	// scratch encodes a record before it is copied into a chunk.
	scratch []byte
	// live is the bytes of the records the index points at
	// (Limits.MaxEndedBytes).
	live int64
}

func newEndedJobs() endedJobs {
	return endedJobs{cur: -1, byUUID: map[ids.UUID]endedEntry{}, byOther: map[string]endedEntry{}}
}

func (s *endedJobs) len() int { return len(s.byUUID) + len(s.byOther) }

func (s *endedJobs) get(k jobKey) (endedEntry, bool) {
	if k.other != "" {
		e, ok := s.byOther[k.other]
		return e, ok
	}
	e, ok := s.byUUID[k.uuid]
	return e, ok
}

func (s *endedJobs) set(k jobKey, e endedEntry) {
	if k.other != "" {
		s.byOther[k.other] = e
	} else {
		s.byUUID[k.uuid] = e
	}
}

// put stores j, of queue, as a record and indexes it. A record is the
// queue's name and the job's idempotency key (with the index's entry,
// what dropping the job needs: a purge decodes no payload), then the
// job's snapshot encoding.
func (s *endedJobs) put(queue string, j *Job) endedEntry {
	return s.putKey(keyOf(j.ID), queue, j)
}

// putKey is put for a job whose key the caller has.
func (s *endedJobs) putKey(k jobKey, queue string, j *Job) endedEntry {
	w := wire.Writer{B: s.scratch[:0]}
	w.Str(queue)
	w.Str(j.IdemKey)
	j.code(&wire.Coder{W: &w, Version: snapshotVersion})
	s.scratch = w.B
	e := endedEntry{loc: s.store(w.B), seq: j.Seq, purgeAt: j.purgeAt, status: j.Status}
	s.set(k, e)
	if len(s.scratch) > endedChunkBytes {
		s.scratch = nil // one large record's buffer is not kept
	}
	return e
}

// store appends rec to the current chunk, or a new one, and returns
// where it lies.
func (s *endedJobs) store(rec []byte) recLoc {
	var pre [binary.MaxVarintLen64]byte
	np := binary.PutUvarint(pre[:], uint64(len(rec)))
	need := np + len(rec)
	if s.cur < 0 || len(s.chunks[s.cur].b)+need > cap(s.chunks[s.cur].b) {
		if s.cur >= 0 {
			s.retire(uint32(s.cur))
		}
		s.cur = s.newChunk(max(need, endedChunkBytes))
	}
	c := s.chunks[s.cur]
	c.b = append(c.b, pre[:np]...)
	off := len(c.b)
	c.b = append(c.b, rec...)
	c.live += len(rec)
	s.live += int64(len(rec))
	return recLoc{chunk: uint32(s.cur), off: uint32(off), n: uint32(len(rec))}
}

func (s *endedJobs) newChunk(size int) int {
	c := &endedChunk{b: make([]byte, 0, size)}
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		s.chunks[i] = c
		return int(i)
	}
	s.chunks = append(s.chunks, c)
	return len(s.chunks) - 1
}

// rec is the record at l (see put).
func (s *endedJobs) rec(l recLoc) []byte {
	return s.chunks[l.chunk].b[l.off : l.off+l.n : l.off+l.n]
}

// decode returns the job at l and its queue's name.
func (s *endedJobs) decode(l recLoc) (string, *Job) {
	return decodeRecord(s.rec(l))
}

func decodeRecord(rec []byte) (string, *Job) {
	r := wire.Reader{B: rec}
	queue := r.Str()
	r.Bytes() // the idempotency key, in the job's encoding too
	j := &Job{Queue: queue}
	j.code(&wire.Coder{R: &r, Version: snapshotVersion})
	if r.Err != nil {
		panic("jobs: an ended job's record does not decode: " + r.Err.Error())
	}
	return queue, j
}

// jobBytes is the job's snapshot encoding within its record (after the
// queue's name and the idempotency key).
func jobBytes(rec []byte) []byte {
	r := wire.Reader{B: rec}
	r.Bytes()
	r.Bytes()
	return r.B
}

// del forgets the job with key k, whose entry is e.
func (s *endedJobs) del(k jobKey, e endedEntry) {
	if k.other != "" {
		delete(s.byOther, k.other)
	} else {
		delete(s.byUUID, k.uuid)
	}
	c := s.chunks[e.loc.chunk]
	was := c.live
	c.live -= int(e.loc.n)
	s.live -= int64(e.loc.n)
	switch i := int(e.loc.chunk); {
	case i == s.cur:
	case c.live == 0:
		s.dropChunk(e.loc.chunk)
	case c.sparse() && was*4 >= cap(c.b):
		s.sparse = append(s.sparse, e.loc.chunk) // just went under a quarter
	}
}

// retire is del's check for a chunk that stops being the current one.
func (s *endedJobs) retire(i uint32) {
	switch c := s.chunks[i]; {
	case c.live == 0:
		s.dropChunk(i)
	case c.sparse():
		s.sparse = append(s.sparse, i)
	}
}

func (s *endedJobs) dropChunk(i uint32) {
	s.chunks[i] = nil
	s.free = append(s.free, i)
}

// compact moves the live records of the sparse chunks into the current
// one; moved is told each moved job's queue, seq and new place. A fork
// still reading an old chunk keeps it.
func (s *endedJobs) compact(moved func(queue string, seq uint64, to recLoc)) {
	for len(s.sparse) > 0 {
		i := s.sparse[len(s.sparse)-1]
		s.sparse = s.sparse[:len(s.sparse)-1]
		c := s.chunks[i]
		if c == nil || int(i) == s.cur || !c.sparse() {
			continue // dropped, become current, or filled since
		}
		for r := (wire.Reader{B: c.b}); len(r.B) > 0; {
			n := r.Uvarint()
			off := len(c.b) - len(r.B)
			rec := r.Next(int(n))
			from := recLoc{chunk: i, off: uint32(off), n: uint32(n)}
			queue, _, id := recordHead(rec)
			k := keyOf(id)
			e, ok := s.get(k)
			if !ok || e.loc != from {
				continue // purged, or retried since
			}
			e.loc = s.store(rec)
			s.set(k, e)
			c.live -= int(n)
			s.live -= int64(n) // stored again above
			moved(queue, e.seq, e.loc)
		}
		s.dropChunk(i)
	}
}

// recordHead is what a record holds before the job's encoding, and the
// job's id (which the encoding starts with).
func recordHead(rec []byte) (queue, key, id string) {
	r := wire.Reader{B: rec}
	return r.Str(), r.Str(), r.Str()
}

// view is what a fork needs to read the records its queues point at.
func (s *endedJobs) view() endedJobs {
	v := endedJobs{cur: -1, chunks: make([]*endedChunk, len(s.chunks))}
	for i, c := range s.chunks {
		if c != nil {
			v.chunks[i] = &endedChunk{b: c.b}
		}
	}
	return v
}
