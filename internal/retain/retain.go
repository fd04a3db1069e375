// Package retain is the retention queue every workload keeps per
// partition: what has ended (a reservation, a saga, a job, a run of
// released messages), in the order it ended, each with the time it is
// to be purged. One purge timer per partition serves the queue's front
// instead of a timer per entry; the workload arms it when Push says the
// queue was empty and, after PopDue, for Next.
//
// It is a FIFO, not a priority queue: an entry due early waits behind
// one queued before it and due later (a lowered retention), exactly as
// the workloads' snapshots record it, so replay purges the same things.
//
// Entries live in chunks of chunkLen. A chunk goes as soon as its last
// entry is popped, so memory follows what is queued and no pop ever
// shifts the queue. View copies only the chunk pointers, for a snapshot
// encoded off the partition: the queue never writes below the lengths a
// view can read (pushes go past them, pops only move the head, and a
// chunk a view may share is neither cleared nor reused).
package retain

import (
	"iter"
	"slices"
)

// Entry is what a queue holds: something with the time it is due.
type Entry interface{ Due() int64 }

const (
	// chunkLen is how many entries a chunk holds.
	chunkLen = 1024
	// firstChunkCap is the first chunk's starting capacity, so a
	// partition with few ended things holds a few entries' memory, not
	// a whole chunk's; it doubles up to chunkLen.
	firstChunkCap = 8
)

// Queue is a FIFO of entries. The zero Queue is empty and ready.
type Queue[T Entry] struct {
	// chunks: every chunk but the last holds chunkLen entries.
	chunks [][]T
	// head is the first live entry's index in chunks[0]; n counts the
	// live entries.
	head, n int
	// shared: the first shared chunks may be read by a view, so their
	// entries are never overwritten.
	shared int
}

// Len is how many entries are queued.
func (q *Queue[T]) Len() int { return q.n }

// Push queues v at the back; wasEmpty says the queue was empty, so the
// caller arms its purge timer for v.
func (q *Queue[T]) Push(v T) (wasEmpty bool) {
	wasEmpty = q.n == 0
	last := len(q.chunks) - 1
	if last < 0 || len(q.chunks[last]) == chunkLen {
		c := chunkLen
		if last < 0 {
			c = firstChunkCap
		}
		q.chunks = append(q.chunks, make([]T, 0, c))
		last++
	}
	c := q.chunks[last]
	if len(c) == cap(c) {
		// Grown by copy, never in place: a view keeps the old array.
		c = append(make([]T, 0, min(2*cap(c), chunkLen)), c...)
	}
	q.chunks[last] = append(c, v)
	q.n++
	return wasEmpty
}

// Front is the entry queued first.
func (q *Queue[T]) Front() (v T, ok bool) {
	if q.n == 0 {
		return v, false
	}
	return q.chunks[0][q.head], true
}

// Back is the entry queued last.
func (q *Queue[T]) Back() (v T, ok bool) {
	if q.n == 0 {
		return v, false
	}
	i := q.head + q.n - 1
	return q.chunks[i/chunkLen][i%chunkLen], true
}

// Next is when the front entry is due.
func (q *Queue[T]) Next() (at int64, ok bool) {
	v, ok := q.Front()
	if !ok {
		return 0, false
	}
	return v.Due(), true
}

// Pop removes the front entry and returns it.
func (q *Queue[T]) Pop() (v T, ok bool) {
	if q.n == 0 {
		return v, false
	}
	c := q.chunks[0]
	v = c[q.head]
	if q.shared == 0 {
		var zero T
		c[q.head] = zero // let what it points to go now
	}
	q.head++
	q.n--
	switch {
	case q.n == 0:
		q.emptied()
	case q.head == chunkLen:
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		q.head = 0
		q.shared = max(q.shared-1, 0)
	}
	return v, true
}

// emptied keeps the one chunk left for the next pushes unless a view may
// read it.
func (q *Queue[T]) emptied() {
	q.head = 0
	if q.shared > 0 || len(q.chunks) != 1 {
		q.chunks, q.shared = nil, 0
		return
	}
	q.chunks[0] = q.chunks[0][:0]
}

// PopDue pops the entries at the front due at now, at most max of them,
// in queue order, and gives each to drop once it is off the queue. It
// stops at the first entry not yet due, whatever is queued behind it.
// It returns how many it popped.
func (q *Queue[T]) PopDue(now int64, max int, drop func(T)) int {
	k := 0
	for ; k < max; k++ {
		v, ok := q.Front()
		if !ok || v.Due() > now {
			break
		}
		q.Pop()
		drop(v)
	}
	return k
}

// All yields the queued entries, front first.
func (q *Queue[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		i, left := q.head, q.n
		for _, c := range q.chunks {
			for ; i < len(c) && left > 0; i++ {
				if !yield(c[i]) {
					return
				}
				left--
			}
			i = 0
		}
	}
}

// View returns a queue holding what q holds now, for a snapshot encoded
// on another goroutine while q goes on. It costs a copy of the chunk
// pointers. The view is a queue of its own: pushing to it copies its
// last chunk first.
func (q *Queue[T]) View() Queue[T] {
	v := Queue[T]{chunks: slices.Clone(q.chunks), head: q.head, n: q.n, shared: len(q.chunks)}
	if k := len(v.chunks) - 1; k >= 0 {
		c := v.chunks[k]
		v.chunks[k] = c[:len(c):len(c)]
	}
	q.shared = len(q.chunks)
	return v
}
