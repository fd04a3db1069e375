//go:build !linux

package bench

import (
	"errors"
	"os/exec"
)

var errNoAffinity = errors.New("--cores pins processes to CPUs, which this bench does on Linux only")

func availableCPUs() ([]int, error) { return nil, errNoAffinity }

func startPinned(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	return errNoAffinity
}

func pinSelf([]int) (func() error, error) { return nil, errNoAffinity }
