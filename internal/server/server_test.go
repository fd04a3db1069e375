package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const diskFullChild = "SURGE_SERVER_TEST_DISK_FULL_CHILD"

// TestHealthReportsFailedLog runs the real server (server.Run) in a child
// process, checks /healthz and /v1/health_check answer 200, then makes
// every further write to the log fail and sends a request: the log fails,
// the engine refuses all work, and both health routes must answer 503 so
// that a health checker takes the node out.
//
// The failure is a real write error from the kernel, not a fake log: the
// child lowers its own RLIMIT_FSIZE to the size of the active segment, so
// the next append (at an offset at or past the limit) fails with EFBIG
// (Go ignores SIGXFSZ), whatever the user, root included. The limit is set
// in a child so it cannot touch any file the test process writes.
func TestHealthReportsFailedLog(t *testing.T) {
	if dir := os.Getenv(diskFullChild); dir != "" {
		diskFullServer(dir)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHealthReportsFailedLog$")
	cmd.Env = append(os.Environ(), diskFullChild+"="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("server output:\n%s", stderr.String())
		}
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	expect := func(prefix string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, prefix) {
				t.Fatalf("child said %q (closed: %v), want %s", l, !ok, prefix)
			}
			return strings.TrimPrefix(l, prefix)
		case <-time.After(15 * time.Second):
			t.Fatalf("child did not say %s", prefix)
		}
		return ""
	}
	base := "http://" + expect("ADDR ")
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		r, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		return r.StatusCode, string(b)
	}
	post := func(path, body string) (int, string) {
		t.Helper()
		r, err := client.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		return r.StatusCode, string(b)
	}

	for _, path := range []string{"/healthz", "/v1/health_check"} {
		if st, body := get(path); st != http.StatusOK {
			t.Fatalf("%s of a healthy server: %d %s", path, st, body)
		}
	}
	if st, body := get("/metrics"); st != http.StatusOK || !strings.Contains(body, "\nsurge_engine_log_failed 0\n") {
		t.Fatalf("/metrics of a healthy server: %d, want 200 with surge_engine_log_failed 0", st)
	}
	if st, body := post("/v1/event", `{"eventName":"e","areas":[{"areaId":"A","price":1,"rowCount":10,"colCount":10}]}`); st != http.StatusOK {
		t.Fatalf("create event: %d %s", st, body)
	}

	// The disk fills up.
	fmt.Fprintln(stdin, "FILL")
	expect("FULL")
	if st, body := post("/v1/event/e/reservation", `{"eventId":"e","areaId":"A","numOfSeats":1,"type":"RANDOM"}`); st != http.StatusServiceUnavailable {
		t.Fatalf("reservation the log cannot write: %d %s, want 503", st, body)
	}
	for _, path := range []string{"/healthz", "/v1/health_check"} {
		st, body := get(path)
		var e struct{ Error string }
		if st != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &e) != nil ||
			!strings.Contains(e.Error, "log failed") || !strings.Contains(e.Error, "restart") {
			t.Fatalf("%s after the log failed: %d %s; want 503 with a JSON error saying the log failed and the server must be restarted", path, st, body)
		}
	}
	// The alert SurgeLogFailed (deploy/prometheus) reads this gauge.
	if st, body := get("/metrics"); st != http.StatusOK || !strings.Contains(body, "\nsurge_engine_log_failed 1\n") {
		t.Fatalf("/metrics after the log failed: %d, want 200 with surge_engine_log_failed 1", st)
	}

	// Shut the child down (EOF on its stdin) so that a data race it saw
	// fails the test; then stderr is complete.
	stdin.Close()
	for range lines {
	}
	err = cmd.Wait()
	stopped = true
	if err != nil {
		t.Errorf("child: %v", err)
	}
	if !strings.Contains(stderr.String(), "file too large") {
		t.Errorf("the log did not fail with EFBIG")
	}
}

// diskFullServer is the child: it serves from dir, prints its address, on
// "FILL" from stdin caps the size of files it may write at the current size
// of the log's active segment, and shuts down at the end of stdin.
func diskFullServer(dir string) {
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, Config{
			Addr:    "127.0.0.1:0",
			DataDir: dir,
			Logger:  slog.New(slog.NewTextHandler(os.Stderr, nil)),
			Ready:   ready,
		})
	}()
	select {
	case addr := <-ready:
		fmt.Printf("ADDR %s\n", addr)
	case err := <-errc:
		fmt.Fprintln(os.Stderr, "server.Run:", err)
		os.Exit(1)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() != "FILL" {
			continue
		}
		segs, _ := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
		if len(segs) == 0 {
			fmt.Fprintln(os.Stderr, "no log segment in", dir)
			os.Exit(1)
		}
		fi, err := os.Stat(slices.Max(segs)) // names are zero-padded positions
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// The log keeps zeros written ahead of its end, and overwriting
		// them needs no space: the disk is full from the last non-zero
		// byte on, where the log's next write begins.
		lim.Cur = uint64(lastNonZero(slices.Max(segs), fi.Size()))
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("FULL")
	}
	stop()
	// Closing a failed engine reports the log's error; that is expected.
	fmt.Fprintln(os.Stderr, "server.Run returned:", <-errc)
	os.Exit(0)
}

// lastNonZero is the offset just past the last non-zero byte of the file
// at path, of size bytes.
func lastNonZero(path string, size int64) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return size
	}
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return int64(n)
}
