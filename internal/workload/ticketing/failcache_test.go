package ticketing

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestFailedCacheSlotTakenByNewer: a later id in the same slot takes it;
// the earlier one is then a miss, never the other's body, and ids in
// other slots stay.
func TestFailedCacheSlotTakenByNewer(t *testing.T) {
	var c failedCache
	a := [16]byte{3, 1, 2, 9}
	b := [16]byte{3, 1, 2, 7}  // a's shard and slot
	other := [16]byte{3, 1, 3} // a's shard, the next slot
	c.put(a, []byte("a"), 0)
	c.put(other, []byte("o"), 0)
	c.put(b, []byte("b"), 0)
	if got, ok := c.get(a, 1); ok {
		t.Fatalf("a's slot went to b, yet a answered %q", got)
	}
	if got, ok := c.get(b, 1); !ok || string(got) != "b" {
		t.Fatalf("b: %q %v", got, ok)
	}
	if got, ok := c.get(other, 1); !ok || string(got) != "o" {
		t.Fatalf("other: %q %v", got, ok)
	}
	if _, ok := c.get([16]byte{5}, 1); ok {
		t.Fatal("an id never put answered")
	}
}

// TestFailedCacheBounded: however many ids go in, it holds at most its
// slots, every get answers its own id's body, and the id put last is
// always there.
func TestFailedCacheBounded(t *testing.T) {
	var c failedCache
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 3 * failedCacheShards * failedCacheSlots
	var ids [][16]byte
	for i := range n {
		id := newID(int(rng.Uint32() % 8))
		ids = append(ids, id)
		c.put(id, id[:], 0)
		if i%997 == 0 {
			if got, ok := c.get(id, 1); !ok || !bytes.Equal(got, id[:]) {
				t.Fatalf("the id just put is missing: %v %v", got, ok)
			}
		}
	}
	held := 0
	for _, id := range ids {
		if got, ok := c.get(id, 1); ok {
			held++
			if !bytes.Equal(got, id[:]) {
				t.Fatalf("id %x answered another's body %x", id, got)
			}
		}
	}
	if limit := failedCacheShards * failedCacheSlots; held > limit || held < limit/2 {
		t.Fatalf("holds %d of %d ids put, limit %d", held, n, limit)
	}
}

// TestFailedCacheEntryExpires: an entry is not served from its record's
// purge time on, so a purged FAILED reservation is not answered from here.
func TestFailedCacheEntryExpires(t *testing.T) {
	var c failedCache
	id := [16]byte{1}
	c.put(id, []byte("x"), 100)
	if _, ok := c.get(id, 99); !ok {
		t.Fatal("entry missing before it expires")
	}
	if b, ok := c.get(id, 100); ok {
		t.Fatalf("expired entry served: %q", b)
	}
}
