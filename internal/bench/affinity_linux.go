package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// The many-core runs (cores.go) pin the server under test to some CPUs
// and the generator to the others, as the 16-core figures were
// measured: a server that shares its cores with the generator is charged
// for neither's contention, but its batches and hand-offs change with it.

// availableCPUs are the CPUs this process may run on, in order.
func availableCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading this process's CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

func cpuSetOf(cpus []int) *unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return &set
}

// startPinned starts cmd on cpus: a child inherits the affinity of the
// thread that forks it, so the thread is locked, given the mask for the
// fork and given its own back. Every thread of the child, and its Go
// runtime's GOMAXPROCS, then start from cpus.
func startPinned(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var own unix.CPUSet
	if err := unix.SchedGetaffinity(0, &own); err != nil {
		return fmt.Errorf("reading the CPU affinity: %w", err)
	}
	if err := unix.SchedSetaffinity(0, cpuSetOf(cpus)); err != nil {
		return fmt.Errorf("pinning to CPUs %s: %w", cpuList(cpus), err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &own); rerr != nil && err == nil {
		// The thread goes back to the pool pinned; the rest of the bench
		// would run on it alone at times. Say so rather than measure that.
		err = fmt.Errorf("restoring the CPU affinity after starting %s: %w", cmd.Path, rerr)
	}
	return err
}

// pinSelf moves every thread of this process to cpus (threads made later
// inherit it from their maker) and sets GOMAXPROCS to match; restore puts
// each thread it moved back on the process's mask before and GOMAXPROCS
// back to its default.
func pinSelf(cpus []int) (restore func() error, err error) {
	var own unix.CPUSet
	if err := unix.SchedGetaffinity(0, &own); err != nil {
		return nil, fmt.Errorf("reading the CPU affinity: %w", err)
	}
	if err := setAllThreads(cpuSetOf(cpus)); err != nil {
		_ = setAllThreads(&own)
		return nil, err
	}
	_, fixed := os.LookupEnv("GOMAXPROCS")
	prev := runtime.GOMAXPROCS(len(cpus))
	return func() error {
		err := setAllThreads(&own)
		if fixed {
			runtime.GOMAXPROCS(prev)
		} else {
			runtime.SetDefaultGOMAXPROCS()
		}
		return err
	}, nil
}

// setAllThreads sets every thread's mask, listing the threads again until
// a pass finds none it has not set: a thread made during a pass by one not
// yet moved would keep the old mask.
func setAllThreads(set *unix.CPUSet) error {
	done := map[int]bool{}
	for range 100 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			done[tid] = true
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("setting thread %d's CPU affinity: %w", tid, err)
			}
		}
		if !fresh {
			return nil
		}
	}
	return errors.New("setting the CPU affinity: threads kept appearing")
}
