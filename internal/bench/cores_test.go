package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestCPUList(t *testing.T) {
	for _, c := range []struct {
		cpus []int
		want string
	}{
		{nil, ""}, {[]int{0}, "0"}, {[]int{0, 1}, "0-1"}, {[]int{0, 1, 2, 3, 8}, "0-3,8"},
		{[]int{1, 3, 5}, "1,3,5"}, {[]int{2, 3, 7, 8, 9}, "2-3,7-9"},
	} {
		if got := cpuList(c.cpus); got != c.want {
			t.Errorf("cpuList(%v) = %q, want %q", c.cpus, got, c.want)
		}
	}
}

// allowedCPUs reads a process's or thread's Cpus_allowed_list.
func allowedCPUs(t *testing.T, statusPath string) string {
	t.Helper()
	b, err := os.ReadFile(statusPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no Cpus_allowed_list", statusPath)
	return ""
}

// A child started pinned runs on those CPUs alone, and the starting
// thread is given its own mask back.
func TestStartPinned(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	avail, err := availableCPUs()
	if err != nil {
		t.Fatal(err)
	}
	last := avail[len(avail)-1:]
	cmd := exec.Command("sleep", "30")
	if err := startPinned(cmd, last); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got := allowedCPUs(t, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/status"); got != cpuList(last) {
		t.Errorf("child on CPUs %s, want %s", got, cpuList(last))
	}
	if got := allowedCPUs(t, "/proc/self/status"); got != cpuList(avail) {
		t.Errorf("the bench's main thread on CPUs %s after the start, want %s", got, cpuList(avail))
	}
	assertThreadsOn(t, cpuList(avail))
}

// assertThreadsOn checks every thread of this process is on cpus.
func assertThreadsOn(t *testing.T, cpus string) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if got := allowedCPUs(t, filepath.Join("/proc/self/task", e.Name(), "status")); got != cpus {
			t.Errorf("thread %s on CPUs %s, want %s", e.Name(), got, cpus)
		}
	}
}

// pinSelf moves every thread, those started while pinned included, and
// GOMAXPROCS; restore moves them all back.
func TestPinSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	avail, err := availableCPUs()
	if err != nil {
		t.Fatal(err)
	}
	// Restored: the runtime's default (the CPUs it may use), or what
	// it was if GOMAXPROCS is set in the environment.
	procs := len(avail)
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		procs = runtime.GOMAXPROCS(0)
	}
	last := avail[len(avail)-1:]
	restore, err := pinSelf(last)
	if err != nil {
		t.Fatal(err)
	}
	// Goroutines blocked in system calls make the runtime start threads.
	done := make(chan struct{})
	for range 4 {
		go func() {
			r, w, _ := os.Pipe()
			go func() { <-done; w.Close() }()
			var b [1]byte
			_, _ = r.Read(b[:])
			r.Close()
		}()
	}
	assertThreadsOn(t, cpuList(last))
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("GOMAXPROCS %d while pinned to one CPU", n)
	}
	close(done)
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	assertThreadsOn(t, cpuList(avail))
	if n := runtime.GOMAXPROCS(0); n != procs {
		t.Errorf("GOMAXPROCS %d after restore, want %d", n, procs)
	}
}

func TestCoresIsValidated(t *testing.T) {
	avail, err := availableCPUs()
	if err != nil {
		t.Skip(err)
	}
	for _, c := range []struct {
		o    TicketingOptions
		want string
	}{
		{TicketingOptions{Cores: []int{0}}, "at least 1"},
		{TicketingOptions{Cores: []int{1, 1}}, "twice"},
		{TicketingOptions{Cores: []int{len(avail) + 1}}, "this bench may run on"},
		{TicketingOptions{Cores: []int{1}, Crowd: true}, "--crowd"},
		{TicketingOptions{Cores: []int{1}, Options: Options{Target: "http://x"}}, "--target"},
	} {
		if err := c.o.checkCores(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o.Cores, err, c.want)
		}
	}
	if err := (TicketingOptions{Cores: []int{len(avail), 1}}).checkCores(); err != nil {
		t.Errorf("a list this machine can run: %v", err)
	}
}

func TestCoresGoal(t *testing.T) {
	run := func(n int, perCPU float64, gen string, busy float64) *CoresRun {
		r := &CoresRun{Cores: n, ServerCPUs: "x", GeneratorCPUs: gen, GeneratorBusyPercent: &busy}
		r.ReservationsPerCPUSecond = &perCPU
		return r
	}
	c := &CoresReport{Runs: []*CoresRun{run(2, 30000, "2-15", 40)}}
	c.summarise()
	if c.LastPercentOfFirst != nil || c.goal() != nil {
		t.Fatalf("one count has no goal: %v %v", c.LastPercentOfFirst, c.goal())
	}
	c.Runs = append(c.Runs, run(4, 27000, "4-15", 50), run(8, 23000, "8-15", 95))
	c.summarise()
	g := c.goal()
	if len(g) != 1 || g[0].Value == nil || *g[0].Value < 76.6 || *g[0].Value > 76.7 || g[0].Met == nil || *g[0].Met ||
		!strings.Contains(g[0].Name, "8 cores vs 2") || !strings.Contains(g[0].Note, "it may be the limit") {
		t.Fatalf("goal %+v", g)
	}
	c.Runs[2].ReservationsPerCPUSecond = new(float64)
	*c.Runs[2].ReservationsPerCPUSecond = 24000
	c.summarise()
	if g := c.goal(); g[0].Met == nil || !*g[0].Met {
		t.Fatalf("80 %% is met: %+v", g)
	}
	var out bytes.Buffer
	writeCores(&out, c)
	for _, want := range []string{"8   ", "8-15", "80.0 %", "90.0 %", "95 %"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
