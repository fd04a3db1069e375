package jobs

import (
	"fmt"
	"io"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
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
	var key [2 + ids.Len]byte // "j/" + the UUID
	key[0], key[1] = 'j', '/'
	// A bound keeps a broken reader from spinning for ever; with a good
	// one, missing the partition this often has probability (1-1/n)^(64n),
	// about e^-64.
	for range 64 * partitions {
		if _, err := io.ReadFull(rnd, b[:]); err != nil {
			return "", fmt.Errorf("jobs: drawing a job id: %w", err)
		}
		ids.V4(b).Put((*[ids.Len]byte)(key[2:]))
		if engine.PartitionOfHash(ids.HashBytes(key[:]), partitions) == want {
			return string(key[2:]), nil
		}
	}
	return "", fmt.Errorf("jobs: no job id for queue %q's partition in %d draws", queue, 64*partitions)
}
