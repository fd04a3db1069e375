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
		// 150 MiB of stacks and metadata plus 120 MiB live: 150 + 240.
		{"connection storm: above the floor", 256 * mib, 400 * mib, 250 * mib, 120 * mib, 390 * mib},
		{"large live state", 256 * mib, 600 * mib, 580 * mib, 500 * mib, 1020 * mib},
		{"inconsistent sample", 256 * mib, 10 * mib, 20 * mib, 0, 256 * mib},
	} {
		if got := governedLimit(c.floor, c.total, c.heap, c.live); got != c.want {
			t.Errorf("%s: %d MiB, want %d MiB", c.name, got/mib, c.want/mib)
		}
	}
}
