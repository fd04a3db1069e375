package server

import "testing"

func TestGovernedLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                     string
		floor, total, heap, live int64
		want                     int64
	}{
		{"small state: the floor", 256 * mib, 100 * mib, 90 * mib, 40 * mib, 256 * mib},
		// 150 MiB of stacks and metadata, 120 MiB live, 64 MiB headroom.
		{"connection storm: above the floor", 256 * mib, 400 * mib, 250 * mib, 120 * mib, 334 * mib},
		// 20 MiB outside the heap, 500 MiB live, half of it headroom.
		{"large live state", 256 * mib, 600 * mib, 580 * mib, 500 * mib, 770 * mib},
		{"inconsistent sample", 256 * mib, 10 * mib, 20 * mib, 0, 256 * mib},
	} {
		if got := governedLimit(c.floor, c.total, c.heap, c.live); got != c.want {
			t.Errorf("%s: %d MiB, want %d MiB", c.name, got/mib, c.want/mib)
		}
	}
}
