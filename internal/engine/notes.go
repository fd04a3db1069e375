package engine

import (
	"fmt"
	"maps"
)

// routeNotes folds Options.Notes into Options.Notify, the one function the
// partitions (and, in a cluster, the node a note was forwarded to) call, so
// that each note reaches the module that owns its workload and the engine
// still knows no workload.
func (e *Engine) routeNotes() error {
	routes := maps.Clone(e.opts.Notes)
	if len(routes) == 0 {
		return nil
	}
	for wl := range routes {
		if _, ok := e.workloads[wl]; !ok {
			return fmt.Errorf("engine: Options.Notes routes the notes of workload %d, which this engine does not run", wl)
		}
	}
	all := e.opts.Notify
	e.opts.Notify = func(partition int, workload uint8, v any) {
		if fn := routes[workload]; fn != nil {
			fn(partition, v)
		}
		if all != nil {
			all(partition, workload, v)
		}
	}
	return nil
}
