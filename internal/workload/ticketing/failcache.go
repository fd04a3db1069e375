package ticketing

import "sync"

// failedCache keeps the rendered JSON of recent FAILED compatibility
// reservations, so the GET that the peer's clients send right after every
// POST is answered without a trip through the partition. Only FAILED ones
// qualify: that state is final and can never change (a RESERVED one can be
// cancelled), and it is durable before the POST returns the id, so serving
// it from here is exactly what the partition would answer. Bounded: each
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
	m    map[[16]byte][]byte
	ring [][16]byte
	next int
}

func (c *failedCache) shard(id [16]byte) *failedShard {
	// Byte 0 is random (ids are random v4 UUIDs), so shards fill evenly.
	return &c.shards[id[0]%failedCacheShards]
}

func (c *failedCache) put(id [16]byte, body []byte) {
	s := c.shard(id)
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[[16]byte][]byte, failedCachePerShard)
		s.ring = make([][16]byte, failedCachePerShard)
	}
	if old := s.ring[s.next]; old != ([16]byte{}) {
		delete(s.m, old)
	}
	s.ring[s.next] = id
	s.next = (s.next + 1) % failedCachePerShard
	s.m[id] = body
	s.mu.Unlock()
}

func (c *failedCache) get(id [16]byte) ([]byte, bool) {
	s := c.shard(id)
	s.mu.Lock()
	b, ok := s.m[id]
	s.mu.Unlock()
	return b, ok
}
