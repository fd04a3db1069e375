package server

import (
	"fmt"
	"runtime"
	"time"
)

// Contention profiles (/debug/pprof/mutex and /debug/pprof/block) record
// nothing unless the runtime is told to sample; they are how a many-core
// run finds what serialises the server (a hot lock, a shared writer), so
// --pprof can turn them on. Both cost a little on every contended lock or
// blocking wait while on, hence off by default.

// checkContention refuses contention sampling without --pprof (nothing
// could read it) and negative settings.
func checkContention(cfg Config) error {
	if cfg.PprofMutexFraction < 0 {
		return fmt.Errorf("--pprof-mutex-fraction %d: must be 0 (off) or N, to sample 1 in N contended locks", cfg.PprofMutexFraction)
	}
	if cfg.PprofBlockRate < 0 {
		return fmt.Errorf("--pprof-block-rate %v: must be 0 (off) or a duration, to sample one event per that much time blocked", cfg.PprofBlockRate)
	}
	if !cfg.Pprof && (cfg.PprofMutexFraction > 0 || cfg.PprofBlockRate > 0) {
		return fmt.Errorf("--pprof-mutex-fraction and --pprof-block-rate need --pprof: without it no profile is served")
	}
	return nil
}

// startContention turns the sampling on and has Shutdown turn it off
// again (the runtime's settings are the process's, and tests run several
// servers in one).
func (s *Server) startContention() {
	if s.cfg.PprofMutexFraction > 0 {
		runtime.SetMutexProfileFraction(s.cfg.PprofMutexFraction)
		s.undo = append(s.undo, func() { runtime.SetMutexProfileFraction(0) })
	}
	if s.cfg.PprofBlockRate > 0 {
		runtime.SetBlockProfileRate(blockRate(s.cfg.PprofBlockRate))
		s.undo = append(s.undo, func() { runtime.SetBlockProfileRate(0) })
	}
}

// blockRate is the runtime's block profile rate for one sample per d
// blocked: nanoseconds, at least 1 (every event).
func blockRate(d time.Duration) int { return int(max(d, 1)) }
