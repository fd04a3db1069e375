package ticketing

import (
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// In cluster mode queries and replies cross nodes by gob: every field must.
func TestWireTypesCrossWhole(t *testing.T) {
	if err := engine.CheckWireTypes(Workload{}); err != nil {
		t.Error(err)
	}
}
