package commerce

import (
	"testing"

	"github.com/surge-run/surge/internal/engine/enginetest"
)

// harness runs the commerce machines of n partitions with the engine's
// test kit (enginetest.Harness): sagas cross partitions as messages,
// delivered in a random order across partition pairs.
type harness struct {
	*enginetest.Harness[*Machine, *Result]
}

func newHarness(t testing.TB, seed uint64, n int) *harness {
	return &harness{enginetest.NewHarness[*Machine, *Result](t, Workload{}, n, seed)}
}
