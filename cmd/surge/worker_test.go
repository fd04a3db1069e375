package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRunCommandResultAndFailure(t *testing.T) {
	out, err := runCommand(context.Background(), []string{"sh", "-c", "echo out; echo err >&2"}, nil)
	if err != nil || string(out) != "out\n" {
		t.Fatalf("got %q, %v; want stdout only", out, err)
	}
	_, err = runCommand(context.Background(), []string{"sh", "-c", "echo why >&2; exit 3"}, nil)
	if err == nil || err.Error() != "exit status 3; stderr: why" {
		t.Fatalf("got %v, want the exit status and stderr", err)
	}
	_, err = runCommand(context.Background(), []string{"surge-no-such-program"}, nil)
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("got %v", err)
	}
}

func TestRunCommandKeepsTheTailOfStdout(t *testing.T) {
	out, err := runCommand(context.Background(), []string{"sh", "-c", "head -c 100000 /dev/zero; echo end"}, nil)
	if err != nil || len(out) != maxResultBytes || !strings.HasSuffix(string(out), "\x00end\n") {
		t.Fatalf("got %d bytes ending %q, %v", len(out), out[max(0, len(out)-8):], err)
	}
}

// processGone says whether pid has exited; a zombie counts as gone, since
// the test's container may not reap orphans.
func processGone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

func TestRunCommandKillsItsProcessGroupWhenStopped(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	// The background sleep is a grandchild: only a group kill reaches it.
	_, err := runCommand(ctx, []string{"sh", "-c", "sleep 30 & echo $! > " + pidFile + "; wait"}, nil)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("got %v, want killed", err)
	}
	if d := time.Since(start); d > 20*time.Second { // far below the sleep's 30 s
		t.Fatalf("took %v", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's child %d outlived it", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParseCommand(t *testing.T) {
	if argv, err := parseCommand([]byte(`{"command":["echo","a b"]}`)); err != nil || len(argv) != 2 || argv[1] != "a b" {
		t.Fatalf("got %q, %v", argv, err)
	}
	for _, bad := range []string{`echo hi`, `{"command":"echo hi"}`, `{"command":[]}`, `{}`, `{"command":[""]}`} {
		if _, err := parseCommand([]byte(bad)); err == nil || !strings.Contains(err.Error(), `{"command": ["prog", "arg", ...]}`) {
			t.Errorf("%s: got %v", bad, err)
		}
	}
}
