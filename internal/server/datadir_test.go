package server

// Tests that pin finding 4: the partition count of a data directory. The
// log records the count in every segment header and is the authority;
// surge.json must agree with it, and neither a missing surge.json nor a bad
// value in it nor a bad flag may start the server with another count (keys
// would silently move to other partitions).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/wal"
)

var quietLog = slog.New(slog.DiscardHandler)

func dataDirConfig(dir string, partitions int, ready chan<- string) Config {
	return Config{
		Addr:            "127.0.0.1:0",
		DataDir:         dir,
		Partitions:      partitions,
		ShutdownTimeout: 5 * time.Second,
		Logger:          quietLog,
		Ready:           ready,
	}
}

// startServer runs the server on dir, waits until it answers its health
// check, and returns a function that stops it and returns Run's result.
func startServer(t *testing.T, dir string, partitions int) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, dataDirConfig(dir, partitions, ready)) }()
	select {
	case addr := <-ready:
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			cancel()
			<-errc
			t.Fatalf("health check: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			cancel()
			<-errc
			t.Fatalf("health check: %s", resp.Status)
		}
	case err := <-errc:
		cancel()
		t.Fatalf("Run with --partitions %d on %s: %v", partitions, dir, err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the server did not become ready")
	}
	return func() error {
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("the server did not stop")
			return nil
		}
	}
}

func mustServe(t *testing.T, dir string, partitions int) {
	t.Helper()
	if err := startServer(t, dir, partitions)(); err != nil {
		t.Fatalf("stopping the server: %v", err)
	}
}

// runRefused runs the server on dir and requires it to exit with an error
// quickly, without ever becoming ready.
func runRefused(t *testing.T, dir string, partitions int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, dataDirConfig(dir, partitions, ready)) }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Run returned nil without being stopped")
		}
		return err
	case <-ready:
		cancel()
		<-errc
		t.Fatalf("the server started with --partitions %d on %s; it must refuse", partitions, dir)
	case <-time.After(10 * time.Second):
		t.Fatal("Run neither started nor refused within 10s")
	}
	return nil
}

// metaOf reads the partition count in dir's surge.json; ok is false when
// there is no such file.
func metaOf(t *testing.T, dir string) (partitions int, ok bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if m.FormatVersion != metaFormatVersion {
		t.Fatalf("surge.json has format version %d", m.FormatVersion)
	}
	return m.Partitions, true
}

// logPartitionsOf opens the log in dir as recorded and returns its count.
func logPartitionsOf(t *testing.T, dir string) int {
	t.Helper()
	lg, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal")})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	return lg.Partitions()
}

func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error does not say %q: %v", p, err)
		}
	}
}

// TestNewDataDirGetsEightPartitions: a data directory that does not exist
// yet, started with --partitions 0, gets the default of 8, in the log and
// in surge.json, and keeps it on the next start.
func TestNewDataDirGetsEightPartitions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	mustServe(t, dir, 0)
	if n, ok := metaOf(t, dir); !ok || n != 8 {
		t.Fatalf("surge.json: %d partitions (present %v), want 8", n, ok)
	}
	if n := logPartitionsOf(t, dir); n != 8 {
		t.Fatalf("the log has %d partitions, want 8", n)
	}
	mustServe(t, dir, 0)
	mustServe(t, dir, 8)
	if n, _ := metaOf(t, dir); n != 8 {
		t.Fatalf("surge.json says %d after restarts", n)
	}
}

// TestPartitionCountCannotChangeOnceDataExists pins finding 4 (surge.json
// deleted). A directory created with 4 partitions whose surge.json was
// deleted must refuse --partitions 6 with an error naming both counts, and
// must not write a surge.json with 6. Started with --partitions 0 it adopts
// the log's 4 and writes surge.json again. With surge.json present, 6 is
// refused as well, and a surge.json that disagrees with the log is refused
// when the flag does not decide.
//
// Old code: a missing surge.json was recreated from the flag (or the
// default 8) and the server started with that count over a log written
// with 4: every key moved to another partition.
func TestPartitionCountCannotChangeOnceDataExists(t *testing.T) {
	dir := t.TempDir()
	mustServe(t, dir, 4)
	if n, _ := metaOf(t, dir); n != 4 {
		t.Fatalf("surge.json says %d, want 4", n)
	}
	metaPath := filepath.Join(dir, metaFile)
	if err := os.Remove(metaPath); err != nil {
		t.Fatal(err)
	}

	err := runRefused(t, dir, 6)
	if !errors.Is(err, wal.ErrPartitionMismatch) {
		t.Fatalf("Run = %v, want an error wrapping wal.ErrPartitionMismatch", err)
	}
	mustContain(t, err, "4 partitions", "not 6", "--partitions 4")
	if n, ok := metaOf(t, dir); ok {
		t.Fatalf("a refused start wrote surge.json with %d partitions", n)
	}
	if n := logPartitionsOf(t, dir); n != 4 {
		t.Fatalf("the log has %d partitions after the refusal, want 4", n)
	}

	mustServe(t, dir, 0) // adopts the log's count, rewrites surge.json
	if n, ok := metaOf(t, dir); !ok || n != 4 {
		t.Fatalf("surge.json after starting with --partitions 0: %d (present %v), want 4", n, ok)
	}

	err = runRefused(t, dir, 6)
	mustContain(t, err, "4 partitions", "--partitions 6")

	// surge.json that disagrees with the log: the log is the authority.
	if err := os.WriteFile(metaPath, []byte(`{"formatVersion":1,"partitions":6}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err = runRefused(t, dir, 0)
	if !errors.Is(err, wal.ErrPartitionMismatch) {
		t.Fatalf("Run = %v, want an error wrapping wal.ErrPartitionMismatch", err)
	}
	mustContain(t, err, metaPath, "4 partitions", "not 6")
}

// TestSurgeJSONWithInvalidPartitionCountIsRefused pins finding 4 (bad
// surge.json). "partitions": 0 or -3 is refused, whatever the flag says and
// whether or not a log exists, with a message that names the file and the
// value and says what to do; the file is left as it was.
//
// Old code: the value was taken as is, and the engine treated a count
// below 1 as "default", starting with 8 partitions.
func TestSurgeJSONWithInvalidPartitionCountIsRefused(t *testing.T) {
	for _, n := range []int{0, -3} {
		for _, withLog := range []bool{false, true} {
			for _, flag := range []int{0, 4} {
				t.Run(fmt.Sprintf("partitions %d, log %v, flag %d", n, withLog, flag), func(t *testing.T) {
					dir := t.TempDir()
					if withLog {
						mustServe(t, dir, 4)
					}
					metaPath := filepath.Join(dir, metaFile)
					bad := []byte(fmt.Sprintf(`{"formatVersion":1,"partitions":%d}`, n))
					if err := os.WriteFile(metaPath, bad, 0o644); err != nil {
						t.Fatal(err)
					}
					err := runRefused(t, dir, flag)
					mustContain(t, err, metaPath, fmt.Sprintf(`"partitions": %d`, n), "not a partition count", "correct it")
					if b, _ := os.ReadFile(metaPath); string(b) != string(bad) {
						t.Fatalf("surge.json changed to %s", b)
					}
				})
			}
		}
	}
}

// TestInvalidPartitionsFlagIsRefused pins finding 4 (Config.Partitions
// -1). A negative count, or one above the limit, is refused, on a new
// directory (which must not be initialised) and on an existing one.
//
// Old code: a negative flag meant "default" and a new directory got 8.
func TestInvalidPartitionsFlagIsRefused(t *testing.T) {
	for _, flag := range []int{-1, wal.MaxPartitions + 1} {
		t.Run(fmt.Sprint(flag), func(t *testing.T) {
			dir := t.TempDir()
			err := runRefused(t, dir, flag)
			mustContain(t, err, fmt.Sprintf("--partitions %d", flag))
			if _, ok := metaOf(t, dir); ok {
				t.Fatal("a refused start wrote surge.json")
			}
			if _, err := os.Stat(filepath.Join(dir, "wal")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused start created the log: %v", err)
			}
			mustServe(t, dir, 2)
			err = runRefused(t, dir, flag)
			mustContain(t, err, fmt.Sprintf("--partitions %d", flag))
			if n, _ := metaOf(t, dir); n != 2 {
				t.Fatalf("surge.json says %d, want 2", n)
			}
		})
	}
}

// TestStaleSurgeJSONIsReportedAgainstTheLog: surge.json says 6 but the
// log, the authority, was written with 4, and the server is started with
// --partitions 4. It must refuse (as with --partitions 0) with an error
// that names the file and both counts and says to correct the file; it
// must neither claim the directory was created with 6 partitions nor
// advise --partitions 6, which the log refuses. Without a log, surge.json
// is the only record and a disagreeing flag is refused without creating
// one.
func TestStaleSurgeJSONIsReportedAgainstTheLog(t *testing.T) {
	dir := t.TempDir()
	mustServe(t, dir, 4)
	metaPath := filepath.Join(dir, metaFile)
	if err := os.WriteFile(metaPath, []byte(`{"formatVersion":1,"partitions":6}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err := runRefused(t, dir, 4)
	mustContain(t, err, metaPath, "6", "4", "orrect")
	for _, wrong := range []string{"--partitions 6", "created with 6"} {
		if strings.Contains(err.Error(), wrong) {
			t.Fatalf("error says %q, but the log was written with 4 partitions: %v", wrong, err)
		}
	}
	err = runRefused(t, dir, 6)
	if !errors.Is(err, wal.ErrPartitionMismatch) {
		t.Fatalf("Run = %v, want an error wrapping wal.ErrPartitionMismatch", err)
	}
	mustContain(t, err, "4 partitions", "not 6")

	// Following the advice: the file moved aside, the log's count is adopted.
	if err := os.Rename(metaPath, metaPath+".old"); err != nil {
		t.Fatal(err)
	}
	mustServe(t, dir, 4)
	if n, _ := metaOf(t, dir); n != 4 {
		t.Fatalf("surge.json says %d, want 4", n)
	}

	fresh := t.TempDir()
	if err := os.WriteFile(filepath.Join(fresh, metaFile), []byte(`{"formatVersion":1,"partitions":6}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err = runRefused(t, fresh, 4)
	mustContain(t, err, "6 partitions", "--partitions 4")
	if segs, _ := filepath.Glob(filepath.Join(fresh, "wal", "*.wal")); len(segs) != 0 {
		t.Fatalf("a refused start created log segments %v", segs)
	}
	mustServe(t, fresh, 6)
}
