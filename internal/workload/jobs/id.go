package jobs

import (
	"encoding/hex"
	"fmt"
	"io"

	"github.com/surge-run/surge/internal/engine"
)

// NewJobID draws random version-4 UUIDs from rnd until one whose job key
// hashes to the partition of queue's key, so that every later command
// about the job is routed by its id alone (see the package comment). It
// takes partitions draws on average; rnd is a ChaCha8 source seeded from
// crypto/rand in the server and a seeded source in tests. Candidates are
// formatted and hashed in a buffer on the stack: only the id kept is
// allocated (it runs for every submit).
func NewJobID(queue string, partitions int, rnd io.Reader) (string, error) {
	if partitions <= 0 {
		return "", fmt.Errorf("jobs: %d partitions", partitions)
	}
	want := engine.PartitionOfHash(engine.Hash(QueueKey(queue)), partitions)
	var b [16]byte
	var key [2 + 36]byte // "j/" + the UUID
	key[0], key[1] = 'j', '/'
	// A bound keeps a broken reader from spinning for ever; with a good
	// one, missing the partition this often has probability (1-1/n)^(64n),
	// about e^-64.
	for range 64 * partitions {
		if _, err := io.ReadFull(rnd, b[:]); err != nil {
			return "", fmt.Errorf("jobs: drawing a job id: %w", err)
		}
		b[6] = b[6]&0x0f | 0x40
		b[8] = b[8]&0x3f | 0x80
		u := key[2:]
		hex.Encode(u[0:8], b[0:4])
		u[8] = '-'
		hex.Encode(u[9:13], b[4:6])
		u[13] = '-'
		hex.Encode(u[14:18], b[6:8])
		u[18] = '-'
		hex.Encode(u[19:23], b[8:10])
		u[23] = '-'
		hex.Encode(u[24:36], b[10:16])
		if engine.PartitionOfHash(hashBytes(key[:]), partitions) == want {
			return string(u), nil
		}
	}
	return "", fmt.Errorf("jobs: no job id for queue %q's partition in %d draws", queue, 64*partitions)
}

// hashBytes is engine.Hash over b, without making b a string.
func hashBytes(b []byte) uint64 {
	h := engine.Hash("")
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
