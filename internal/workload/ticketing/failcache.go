package ticketing

import "sync"

// failedCache keeps the rendered JSON of recent FAILED compatibility
// reservations, so the GET that the peer's clients send right after every
// POST is answered without a trip through the partition. Only FAILED ones
// qualify: that state is final and can never change (a RESERVED one can be
// cancelled), and it is durable before the POST returns the id, so serving
// it from here is exactly what the partition would answer, until the
// record is purged: an entry expires at the record's purge time, after
// which it is a miss and the partition answers (404).
//
// Bounded and direct-mapped: an id has one slot, picked by its random
// bytes, and a newer id that lands there takes it. The GET this serves
// comes right after its POST, while only the reservations in flight can
// have taken the slot (a few hundred of 65,536: well under 1 % misses),
// and a miss costs only the partition's answer. A map with an eviction
// ring did the same with a delete and an insert per POST, a few per cent
// of a sold-out spike's CPU.
type failedCache struct {
	shards [failedCacheShards]failedShard
}

const (
	failedCacheShards = 16
	failedCacheSlots  = 4096 // per shard; a power of two
)

type failedShard struct {
	mu    sync.Mutex
	slots []failedEntry // made at the first put
}

type failedEntry struct {
	id      [16]byte
	body    []byte
	expires int64 // Unix ns, the engine's clock; 0: never
}

// slot is where id lives. Ids are random v4 UUIDs: bytes 0 to 5 are
// random (6 and 8 carry the version and variant, 14 and 15 the
// partition), so shards and slots fill evenly.
func (c *failedCache) slot(id [16]byte) (*failedShard, int) {
	return &c.shards[id[0]%failedCacheShards], (int(id[1])<<8 | int(id[2])) & (failedCacheSlots - 1)
}

// put remembers body until expires (Unix ns; 0: until its slot is taken).
func (c *failedCache) put(id [16]byte, body []byte, expires int64) {
	s, i := c.slot(id)
	s.mu.Lock()
	if s.slots == nil {
		s.slots = make([]failedEntry, failedCacheSlots)
	}
	s.slots[i] = failedEntry{id: id, body: body, expires: expires}
	s.mu.Unlock()
}

// get returns the body of id unless its slot went to another id or it
// has expired by now (Unix ns).
func (c *failedCache) get(id [16]byte, now int64) ([]byte, bool) {
	s, i := c.slot(id)
	s.mu.Lock()
	var e failedEntry
	if s.slots != nil {
		e = s.slots[i]
	}
	s.mu.Unlock()
	if e.id != id || e.body == nil || (e.expires != 0 && now >= e.expires) {
		return nil, false
	}
	return e.body, true
}
