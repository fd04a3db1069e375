package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// --pprof-mutex-fraction and --pprof-block-rate turn the runtime's
// sampling on while the server runs, /debug/pprof/block then shows where
// goroutines blocked, and Shutdown turns the sampling off again.
func TestPprofContentionProfiles(t *testing.T) {
	cfg := Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Pprof: true, PprofMutexFraction: 5, PprofBlockRate: time.Nanosecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if got := runtime.SetMutexProfileFraction(-1); got != 5 {
		t.Errorf("mutex profile fraction %d while serving, want 5", got)
	}
	ch := make(chan struct{})
	go func() { time.Sleep(10 * time.Millisecond); close(ch) }()
	<-ch // a blocking event of this test's own, which the profile must show
	resp, err := http.Get("http://" + s.Addr() + "/debug/pprof/block?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "TestPprofContentionProfiles") {
		t.Errorf("block profile: %d, without this test's wait:\n%.500s", resp.StatusCode, body)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if got := runtime.SetMutexProfileFraction(-1); got != 0 {
		t.Errorf("mutex profile fraction %d after Shutdown, want 0", got)
	}
}

// Contention sampling without --pprof, or negative, stops the start with
// a message naming the flag.
func TestContentionFlagsAreChecked(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{PprofMutexFraction: 10}, "need --pprof"},
		{Config{PprofBlockRate: time.Microsecond}, "need --pprof"},
		{Config{Pprof: true, PprofMutexFraction: -1}, "--pprof-mutex-fraction -1"},
		{Config{Pprof: true, PprofBlockRate: -time.Second}, "--pprof-block-rate -1s"},
	} {
		if err := checkContention(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.cfg.Pprof, err, c.want)
		}
	}
	if err := checkContention(Config{Pprof: true, PprofMutexFraction: 100, PprofBlockRate: 10 * time.Microsecond}); err != nil {
		t.Errorf("valid settings refused: %v", err)
	}
}
