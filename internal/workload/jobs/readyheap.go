package jobs

// jobHeap is a min-heap by submission seq of one priority's ready jobs;
// each job knows its index so a cancel or TTL removes it in O(log n).
type jobHeap []*Job

func (h *jobHeap) push(j *Job) {
	j.heapIdx = len(*h)
	*h = append(*h, j)
	h.up(j.heapIdx)
}

func (h *jobHeap) pop() *Job {
	j := (*h)[0]
	h.remove(j)
	return j
}

func (h *jobHeap) remove(j *Job) {
	s := *h
	i, last := j.heapIdx, len(s)-1
	if i != last {
		s[i] = s[last]
		s[i].heapIdx = i
	}
	s[last] = nil
	*h = s[:last]
	j.heapIdx = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h jobHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].Seq <= h[i].Seq {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h jobHeap) down(i int) {
	for {
		l, small := 2*i+1, i
		if l < len(h) && h[l].Seq < h[small].Seq {
			small = l
		}
		if r := l + 1; r < len(h) && h[r].Seq < h[small].Seq {
			small = r
		}
		if small == i {
			return
		}
		h.swap(i, small)
		i = small
	}
}

func (h jobHeap) swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].heapIdx, h[k].heapIdx = i, k
}
