package main

import (
	"strings"
	"testing"
)

// The default worker id is the same after a restart (the slot is freed
// with its process) and differs between workers running at once.
func TestDefaultWorkerIDStableAndDistinct(t *testing.T) {
	dir := t.TempDir()
	const server = "http://127.0.0.1:8080"
	id1, release1, err := claimWorkerID(dir, "host a", server, []string{"q2", "q1"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id1, "host-a-") || !strings.HasSuffix(id1, "-0") || len(id1) > 128 {
		t.Fatalf("first id %q", id1)
	}
	id2, release2, err := claimWorkerID(dir, "host a", server, []string{"q1", "q2"})
	if err != nil {
		t.Fatal(err)
	}
	if id2 == id1 || !strings.HasSuffix(id2, "-1") || strings.TrimSuffix(id2, "-1") != strings.TrimSuffix(id1, "-0") {
		t.Fatalf("two workers at once: %q and %q", id1, id2)
	}
	release1() // the first one exits (or is killed) and starts again
	again, release3, err := claimWorkerID(dir, "host a", server, []string{"q1", "q2"})
	if err != nil {
		t.Fatal(err)
	}
	if again != id1 {
		t.Fatalf("restarted worker got %q, was %q", again, id1)
	}
	other, release4, err := claimWorkerID(dir, "host a", server, []string{"q3"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSuffix(other, "-0") == strings.TrimSuffix(id1, "-0") {
		t.Fatalf("other queues share the id's hash: %q, %q", other, id1)
	}
	release2()
	release3()
	release4()
	long := strings.Repeat("h", 300)
	if id, rel, err := claimWorkerID(dir, long, server, nil); err != nil || len(id) > 128 {
		t.Fatalf("long hostname: %q %v", id, err)
	} else {
		rel()
	}
}
