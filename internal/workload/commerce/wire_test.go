package commerce_test

import (
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/workload/commerce"
)

// Every value that crosses between nodes arrives whole.
func TestWireTypesCrossWhole(t *testing.T) {
	if err := engine.CheckWireTypes(&commerce.Workload{}); err != nil {
		t.Fatal(err)
	}
}
