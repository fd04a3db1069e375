package ticketing

import (
	"bytes"
	"testing"
)

func TestFailedCacheEvictsOldest(t *testing.T) {
	var c failedCache
	var ids [][16]byte
	for i := range failedCachePerShard + 10 {
		var id [16]byte
		id[0], id[1], id[2] = 3, byte(i), byte(i>>8) // all in one shard
		ids = append(ids, id)
		c.put(id, []byte{byte(i)}, 0)
	}
	for i, id := range ids {
		b, ok := c.get(id, 1)
		if i < 10 {
			if ok {
				t.Fatalf("entry %d should have been evicted", i)
			}
			continue
		}
		if !ok || !bytes.Equal(b, []byte{byte(i)}) {
			t.Fatalf("entry %d: %v %v", i, b, ok)
		}
	}
	if len(c.shards[3].m) != failedCachePerShard {
		t.Fatalf("shard holds %d entries, limit %d", len(c.shards[3].m), failedCachePerShard)
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
