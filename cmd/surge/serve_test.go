package main

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"256MiB": 256 << 20, "1GiB": 1 << 30, "300MB": 300e6, "268435456": 268435456, "64 KiB": 64 << 10, "off": -1, "OFF": -1, "0": 0, "12B": 12,
	} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-5MiB", "1.5GiB", "12 parsecs", "99999999999TiB", "256mib"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
}
