package jobs

import (
	"fmt"
	"io"

	"github.com/surge-run/surge/internal/engine"
)

// NewJobID draws random version-4 UUIDs from rnd until one whose job key
// hashes to the partition of queue's key, so that every later command
// about the job is routed by its id alone (see the package comment). It
// takes partitions draws on average; rnd is crypto/rand.Reader in the
// server and a seeded source in tests.
func NewJobID(queue string, partitions int, rnd io.Reader) (string, error) {
	if partitions <= 0 {
		return "", fmt.Errorf("jobs: %d partitions", partitions)
	}
	want := engine.PartitionOfHash(engine.Hash(QueueKey(queue)), partitions)
	var b [16]byte
	// A bound keeps a broken reader from spinning for ever; with a good
	// one, missing the partition this often has probability (1-1/n)^(64n),
	// about e^-64.
	for range 64 * partitions {
		if _, err := io.ReadFull(rnd, b[:]); err != nil {
			return "", fmt.Errorf("jobs: drawing a job id: %w", err)
		}
		b[6] = b[6]&0x0f | 0x40
		b[8] = b[8]&0x3f | 0x80
		id := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
		if engine.PartitionOfHash(engine.Hash(JobKey(id)), partitions) == want {
			return id, nil
		}
	}
	return "", fmt.Errorf("jobs: no job id for queue %q's partition in %d draws", queue, 64*partitions)
}
