package jobs_test

import (
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/workload/jobs"
)

// Every value that crosses between nodes arrives whole.
func TestWireTypesCrossWhole(t *testing.T) {
	if err := engine.CheckWireTypes(&jobs.Workload{}); err != nil {
		t.Fatal(err)
	}
}
