package jobs

import (
	"math/rand/v2"

	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
)

func BenchmarkNewJobID(b *testing.B) {
	r := rand.NewChaCha8([32]byte{1})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewJobID("default", 8, r); err != nil {
			b.Fatal(err)
		}
	}
}

// ids.HashBytes (what NewJobID hashes with) must agree with engine.Hash,
// or ids would land in the wrong partition.
func TestHashBytesIsEngineHash(t *testing.T) {
	for _, s := range []string{"", "j/", "j/0f8c2a1e-4b7d-4e21-9a3c-5d6e7f801234", "q/default"} {
		if ids.HashBytes([]byte(s)) != engine.Hash(s) {
			t.Fatalf("ids.HashBytes(%q) != engine.Hash", s)
		}
	}
}
