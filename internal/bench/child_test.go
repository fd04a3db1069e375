package bench

import (
	"strings"
	"testing"
)

func TestParseProcStatCPU(t *testing.T) {
	// Fields 14 and 15 (utime, stime) are 150 and 50 ticks; the command
	// name has a space and a parenthesis to trip a naive split.
	line := "1234 (surge (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 8 0 1000 0 0\n"
	got, err := parseProcStatCPU([]byte(line))
	if err != nil || got != 2.0 {
		t.Fatalf("got %v, %v; want 2", got, err)
	}
	if _, err := parseProcStatCPU([]byte("1234 (x) S 1")); err == nil {
		t.Fatal("short line accepted")
	}
}

func TestParseMetricsCPU(t *testing.T) {
	in := "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n" +
		"# TYPE process_cpu_seconds_total counter\n" +
		"process_cpu_seconds_total_other 9\n" +
		"process_cpu_seconds_total 12.34\n"
	if got, err := parseMetricsCPU(strings.NewReader(in)); err != nil || got != 12.34 {
		t.Fatalf("got %v, %v", got, err)
	}
	if got, err := parseMetricsCPU(strings.NewReader(`process_cpu_seconds_total{a="b c"} 3 1700000000`)); err != nil || got != 3 {
		t.Fatalf("labelled: got %v, %v", got, err)
	}
	if _, err := parseMetricsCPU(strings.NewReader("go_goroutines 5\n")); err == nil {
		t.Fatal("missing metric not reported")
	}
}

func TestGrouped(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -45000: "-45,000"} {
		if got := grouped(in); got != want {
			t.Errorf("grouped(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestParseProcStatusMemory(t *testing.T) {
	in := "Name:\tsurge\nVmPeak:\t  900000 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t9\n"
	peak, now, err := parseProcStatusMemory([]byte(in))
	if err != nil || peak != 200<<20 || now != 100<<20 {
		t.Fatalf("got %d, %d, %v; want %d, %d", peak, now, err, 200<<20, 100<<20)
	}
	if _, _, err := parseProcStatusMemory([]byte("Name:\tsurge\nVmRSS:\t1 kB\n")); err == nil {
		t.Fatal("missing VmHWM accepted")
	}
	if _, _, err := parseProcStatusMemory([]byte("VmHWM:\t1 MB\nVmRSS:\t1 kB\n")); err == nil {
		t.Fatal("unknown unit accepted")
	}
}
