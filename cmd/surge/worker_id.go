package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/surge-run/surge/internal/ids"
)

// Default worker ids. Without --id, `surge worker` takes
// <host>-<hash>-<n>: the hostname, a hash of the server URL and the sorted
// queues, and the first slot n whose lock file in the state directory this
// process can lock. A restarted worker (even after kill -9: the kernel
// drops the lock with the process) gets its old slot and so its old id,
// and the server gives back at once what the old process held; two
// workers running at once on one host get different slots, so neither
// replaces the other's stream.
const (
	maxWorkerSlots = 1024 // workers of one server and queue set on one host
	maxHostInID    = 64   // bytes of the hostname kept in the id
)

// defaultStateDir is where the slot locks live: the user's cache
// directory, or the temporary one if there is none.
func defaultStateDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "surge")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("surge-%d", os.Getuid()))
}

// idHost makes a hostname safe and short for a worker id.
func idHost(host string) string {
	host = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '-'
	}, host)
	if host == "" {
		host = "worker"
	}
	return host[:min(len(host), maxHostInID)]
}

// workerSetHash names a server and queue set: the same for every restart
// of one worker, whatever order its queues were listed in.
func workerSetHash(server string, queues []string) string {
	qs := slices.Clone(queues)
	slices.Sort(qs)
	h := ids.Hash(server)
	for _, q := range qs {
		h = ids.HashMore(ids.HashMore(h, "\x00"), q)
	}
	return fmt.Sprintf("%08x", uint32(h))
}

// claimWorkerID takes the first free slot in dir and returns its id; the
// slot stays this process's until release (or its exit).
func claimWorkerID(dir, host, server string, queues []string) (id string, release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	set := workerSetHash(server, queues)
	for n := range maxWorkerSlots {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("worker-%s-%d.lock", set, n)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return "", nil, err
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return fmt.Sprintf("%s-%s-%d", idHost(host), set, n), func() { f.Close() }, nil
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return "", nil, err
		}
	}
	return "", nil, fmt.Errorf("all %d worker slots in %s are taken", maxWorkerSlots, dir)
}
