package server

import (
	"fmt"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/module"
	"github.com/surge-run/surge/internal/workload/commerce"
	"github.com/surge-run/surge/internal/workload/jobs"
	"github.com/surge-run/surge/internal/workload/sequencer"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

// Builtin are the workloads `surge serve` runs, in the order their routes
// are mounted and their shutdowns called. A new workload is its package
// (holding its Module) and one line here.
func Builtin() []module.Module {
	return []module.Module{
		ticketing.Module,
		commerce.Module,
		jobs.Module,
		sequencer.Module,
	}
}

// openModules sets every module up for this server, before the engine
// opens (opts holds the partition count), and routes each one's notes to
// it.
func (s *Server) openModules(opts *engine.Options) ([]module.Parts, []engine.Workload, error) {
	env := module.Env{
		Settings:   s.cfg.Settings,
		Partitions: opts.Partitions,
		MaxWaiters: s.cfg.MaxWaiters,
		Clustered:  s.node != nil,
		Logger:     s.logger,
	}
	var (
		all       []module.Parts
		workloads []engine.Workload
	)
	opts.Notes = map[uint8]func(int, any){}
	for _, m := range s.cfg.Modules {
		p, err := m.Open(env)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		if p.Notes != nil {
			opts.Notes[p.Workload.ID()] = p.Notes
		}
		all, workloads = append(all, p), append(workloads, p.Workload)
	}
	return all, workloads, nil
}
