package main

import (
	"fmt"
	"hash/fnv"
	"slices"
	"testing"
)

// workerSetHash names the slot files of workers already running, so it
// must keep the value it had when it hashed with hash/fnv directly.
func TestWorkerSetHashIsFNV1aOfServerAndSortedQueues(t *testing.T) {
	for _, c := range []struct {
		server string
		queues []string
	}{
		{"127.0.0.1:8080", nil},
		{"127.0.0.1:8080", []string{"default"}},
		{"node-1:9000", []string{"b", "a", "emails"}},
	} {
		qs := slices.Sorted(slices.Values(c.queues))
		h := fnv.New64a()
		h.Write([]byte(c.server))
		for _, q := range qs {
			h.Write([]byte{0})
			h.Write([]byte(q))
		}
		if got, want := workerSetHash(c.server, c.queues), fmt.Sprintf("%08x", uint32(h.Sum64())); got != want {
			t.Errorf("workerSetHash(%q, %q) = %s, want %s", c.server, c.queues, got, want)
		}
	}
	if workerSetHash("s", []string{"a", "b"}) != workerSetHash("s", []string{"b", "a"}) {
		t.Error("the order of the queues changes the hash")
	}
}
