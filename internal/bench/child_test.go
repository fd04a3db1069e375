package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestProcCPUAndMemory: the CPU time and resident memory the bench
// reads from /proc (procfs) for a process it started, here its own.
func TestProcCPUAndMemory(t *testing.T) {
	deadline := time.Now().Add(30 * time.Second)
	cpu, err := procCPUSeconds(os.Getpid())
	for err == nil && cpu == 0 && time.Now().Before(deadline) {
		for i := 0; i < 1e6; i++ {
			sink += i
		}
		cpu, err = procCPUSeconds(os.Getpid())
	}
	if err != nil || cpu <= 0 {
		t.Fatalf("CPU %v, %v; want > 0", cpu, err)
	}
	peak, now, err := procMemory(os.Getpid())
	if err != nil || now <= 0 || peak < now {
		t.Fatalf("peak %d, now %d, %v; want 0 < now <= peak", peak, now, err)
	}
	if _, err := procCPUSeconds(-1); err == nil {
		t.Fatal("CPU of a process that does not exist")
	}
	if _, _, err := procMemory(-1); err == nil {
		t.Fatal("memory of a process that does not exist")
	}
}

var sink int

func TestParseMetricsCPU(t *testing.T) {
	in := "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n" +
		"# TYPE process_cpu_seconds_total counter\n" +
		"process_cpu_seconds_total_other 9\n" +
		"process_cpu_seconds_total 12.34\n"
	if got, err := parseMetricsCPU(in); err != nil || got != 12.34 {
		t.Fatalf("got %v, %v", got, err)
	}
	if got, err := parseMetricsCPU(`process_cpu_seconds_total{a="b c"} 3 1700000000` + "\n"); err != nil || got != 3 {
		t.Fatalf("labelled: got %v, %v", got, err)
	}
	if _, err := parseMetricsCPU("go_goroutines 5\n"); err == nil {
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

func parseMetricsCPU(text string) (float64, error) {
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		return 0, err
	}
	return m.cpuSeconds()
}

// freeAddr never hands out a port it handed out among its last
// recentAddrs picks, though the kernel may offer one again at once.
func TestFreeAddrDoesNotRepeat(t *testing.T) {
	seen := map[string]bool{}
	for range recentAddrs {
		a, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("%s picked twice in %d picks", a, recentAddrs)
		}
		seen[a] = true
	}
}
