package jobs

import (
	"math/rand/v2"

	"github.com/surge-run/surge/internal/engine"
	"testing"
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

// hashBytes must agree with engine.Hash, or ids would land in the wrong
// partition.
func TestHashBytesIsEngineHash(t *testing.T) {
	for _, s := range []string{"", "j/", "j/0f8c2a1e-4b7d-4e21-9a3c-5d6e7f801234", "q/default"} {
		if hashBytes([]byte(s)) != engine.Hash(s) {
			t.Fatalf("hashBytes(%q) != engine.Hash", s)
		}
	}
}
