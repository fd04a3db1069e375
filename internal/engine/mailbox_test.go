package engine

import "testing"

// A mailbox hands out its items in the order pushed, at most max at a
// time, while pushes go on between takes (the in-place draining moves
// what is left only now and then).
func TestMailboxKeepsOrderAcrossPartialTakes(t *testing.T) {
	m := mailbox{signal: make(chan struct{}, 1)}
	next, want := uint64(1), uint64(1)
	var got []mail
	for round := range 2000 {
		for range round % 11 {
			m.push(mail{seq: next})
			next++
		}
		got = m.take(got[:0], 7, MaxBatchBytes)
		for _, x := range got {
			if x.seq != want {
				t.Fatalf("round %d: took seq %d, want %d", round, x.seq, want)
			}
			want++
		}
		if l := m.len(); uint64(l) != next-want {
			t.Fatalf("round %d: len %d, want %d", round, l, next-want)
		}
	}
	for m.len() > 0 {
		for _, x := range m.take(got[:0], 7, MaxBatchBytes) {
			if x.seq != want {
				t.Fatalf("draining: took seq %d, want %d", x.seq, want)
			}
			want++
		}
	}
	if want != next {
		t.Fatalf("took %d items, pushed %d", want-1, next-1)
	}
}
