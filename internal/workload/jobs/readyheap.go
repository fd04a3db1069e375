package jobs

// jobHeap is a min-heap by submission seq of one priority's ready jobs.
// A live job knows its index, so a cancel or TTL removes it in O(log n);
// a job kept as a record (pending.go) is found by its key when it comes
// to the top. A record's entry whose job has since been made live again
// stays where it is, stale (the live job has an entry of its own), and
// is dropped when it comes to the top.
type jobHeap struct {
	e     []heapEnt
	stale int
}

// heapEnt is a live job (j) or a record's key.
type heapEnt struct {
	seq uint64
	j   *Job
	key jobKey
}

// len is the number of ready jobs.
func (h *jobHeap) len() int { return len(h.e) - h.stale }

func (h *jobHeap) push(j *Job) {
	j.heapIdx = len(h.e)
	h.e = append(h.e, heapEnt{seq: j.Seq, j: j})
	h.up(j.heapIdx)
}

func (h *jobHeap) pushRecord(seq uint64, k jobKey) {
	h.e = append(h.e, heapEnt{seq: seq, key: k})
	h.up(len(h.e) - 1)
}

// popEntry removes and returns the top entry.
func (h *jobHeap) popEntry() heapEnt {
	top := h.e[0]
	h.removeAt(0)
	if top.j != nil {
		top.j.heapIdx = -1
	}
	return top
}

func (h *jobHeap) remove(j *Job) {
	h.removeAt(j.heapIdx)
	j.heapIdx = -1
}

func (h *jobHeap) removeAt(i int) {
	last := len(h.e) - 1
	if i != last {
		h.e[i] = h.e[last]
		if j := h.e[i].j; j != nil {
			j.heapIdx = i
		}
	}
	h.e[last] = heapEnt{}
	h.e = h.e[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h *jobHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.e[p].seq <= h.e[i].seq {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *jobHeap) down(i int) {
	n := len(h.e)
	for {
		l, small := 2*i+1, i
		if l < n && h.e[l].seq < h.e[small].seq {
			small = l
		}
		if r := l + 1; r < n && h.e[r].seq < h.e[small].seq {
			small = r
		}
		if small == i {
			return
		}
		h.swap(i, small)
		i = small
	}
}

func (h *jobHeap) swap(i, k int) {
	h.e[i], h.e[k] = h.e[k], h.e[i]
	if j := h.e[i].j; j != nil {
		j.heapIdx = i
	}
	if j := h.e[k].j; j != nil {
		j.heapIdx = k
	}
}
