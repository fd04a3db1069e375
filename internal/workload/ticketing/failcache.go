package ticketing

import "sync"

// failedCache keeps the rendered JSON of recent FAILED compatibility
// reservations, so the GET that the peer's clients send right after every
// POST is answered without a trip through the partition. Only FAILED ones
// qualify: that state is final and can never change (a RESERVED one can be
// cancelled), and it is durable before the POST returns the id, so serving
// it from here is exactly what the partition would answer, until the
// record is purged: an entry expires at the record's purge time, after
// which it is a miss and the partition answers (404). Bounded: each
// shard forgets its oldest entry when full; a miss falls back to the
// partition.
type failedCache struct {
	shards [failedCacheShards]failedShard
}

const (
	failedCacheShards   = 16
	failedCachePerShard = 4096
)

type failedShard struct {
	mu   sync.Mutex
	m    map[[16]byte]failedEntry
	ring [][16]byte
	next int
}

type failedEntry struct {
	body    []byte
	expires int64 // Unix ns, the engine's clock; 0: never
}

func (c *failedCache) shard(id [16]byte) *failedShard {
	// Byte 0 is random (ids are random v4 UUIDs), so shards fill evenly.
	return &c.shards[id[0]%failedCacheShards]
}

// put remembers body until expires (Unix ns; 0: until evicted).
func (c *failedCache) put(id [16]byte, body []byte, expires int64) {
	s := c.shard(id)
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[[16]byte]failedEntry, failedCachePerShard)
		s.ring = make([][16]byte, failedCachePerShard)
	}
	if old := s.ring[s.next]; old != ([16]byte{}) {
		delete(s.m, old)
	}
	s.ring[s.next] = id
	s.next = (s.next + 1) % failedCachePerShard
	s.m[id] = failedEntry{body: body, expires: expires}
	s.mu.Unlock()
}

// get returns the body of id unless it has expired by now (Unix ns).
func (c *failedCache) get(id [16]byte, now int64) ([]byte, bool) {
	s := c.shard(id)
	s.mu.Lock()
	e, ok := s.m[id]
	s.mu.Unlock()
	if !ok || (e.expires != 0 && now >= e.expires) {
		return nil, false
	}
	return e.body, true
}
