package sequencer

// seqHeap is a min-heap of PENDING seqs: a lease takes the lowest first,
// so the released position moves as early as it can. Seqs are unique
// and a message leaves only by being leased, so no removal is needed.
// Publishing in server order pushes increasing seqs, which costs O(1).
type seqHeap []uint64

func (h *seqHeap) push(s uint64) {
	*h = append(*h, s)
	x := *h
	for i := len(x) - 1; i > 0; {
		p := (i - 1) / 2
		if x[p] <= x[i] {
			break
		}
		x[p], x[i] = x[i], x[p]
		i = p
	}
}

func (h *seqHeap) pop() uint64 {
	x := *h
	top := x[0]
	last := len(x) - 1
	x[0] = x[last]
	x = x[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(x) && x[l] < x[small] {
			small = l
		}
		if r := l + 1; r < len(x) && x[r] < x[small] {
			small = r
		}
		if small == i {
			break
		}
		x[i], x[small] = x[small], x[i]
		i = small
	}
	*h = x
	return top
}
