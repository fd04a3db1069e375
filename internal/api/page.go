package api

import (
	"cmp"
	"container/heap"
	"fmt"
	"iter"
	"net/http"
	"slices"
	"strconv"
)

// Page is a cursor page's request: the items whose key is above After
// (all when After is empty), at most Limit of them.
type Page struct {
	After string
	Limit int
}

// ParsePage reads ?after=&limit= for an operator read whose pages hold
// def items unless limit says otherwise, at most max; an after longer
// than maxAfter bytes names nothing. It answers 400 itself and returns
// ok false on bad input.
func ParsePage(w http.ResponseWriter, r *http.Request, def, max, maxAfter int) (p Page, ok bool) {
	q := r.URL.Query()
	p.After, p.Limit = q.Get("after"), def
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > max {
			Error(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 1 to %d, got %s", max, Quote(s)))
			return p, false
		}
		p.Limit = n
	}
	if len(p.After) > maxAfter {
		Error(w, http.StatusBadRequest, fmt.Sprintf("after must be a key of at most %d bytes, got %d", maxAfter, len(p.After)))
		return p, false
	}
	return p, true
}

// Smallest returns, in order, the at most limit smallest keys of seq that
// are above after (every key when after is empty): one pass keeping a
// heap of limit keys, so a page of a large index costs no copy or sort of
// it.
func Smallest(seq iter.Seq[string], after string, limit int) []string {
	h := &maxHeap[string]{}
	for k := range seq {
		if after != "" && k <= after {
			continue
		}
		if h.Len() < limit {
			heap.Push(h, k)
		} else if limit > 0 && k < (*h)[0] {
			(*h)[0] = k
			heap.Fix(h, 0)
		}
	}
	out := []string(*h)
	slices.Sort(out)
	return out
}

// MergePage merges the partitions' pages into the page: the limit
// smallest, and the next cursor when there are more. Each partition is
// asked for limit+1 items, so that a last page says it is the last.
func MergePage[T any](parts [][]T, key func(T) string, limit int) (page []T, next string) {
	var all []T
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	if len(all) > limit {
		all = all[:limit]
		next = key(all[limit-1])
	}
	return all, next
}

type maxHeap[K cmp.Ordered] []K

func (h maxHeap[K]) Len() int           { return len(h) }
func (h maxHeap[K]) Less(i, j int) bool { return h[i] > h[j] }
func (h maxHeap[K]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap[K]) Push(x any)        { *h = append(*h, x.(K)) }
func (h *maxHeap[K]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
