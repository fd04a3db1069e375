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
		c.put(id, []byte{byte(i)})
	}
	for i, id := range ids {
		b, ok := c.get(id)
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
