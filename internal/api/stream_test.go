package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func protoClient(h2c bool) *http.Client {
	var p http.Protocols
	if h2c {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// A stream (OpenStream) lives past the server's read and write timeouts
// on both protocols; an ordinary handler that takes as long is cut, which
// shows the timeouts are in force.
func TestOpenStreamOutlivesServerTimeouts(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var st *Stream
			if r.URL.Path == "/stream" {
				st = OpenStream(w, r)
				defer st.Close()
			}
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			select {
			case <-time.After(3 * timeout):
			case <-r.Context().Done():
				return
			}
			if st != nil {
				_ = st.Write([]byte("late"))
				return
			}
			w.Write([]byte("late"))
		})
		_, addr := startServer(t, h, Limits{ReadTimeout: timeout, WriteTimeout: timeout}, nil)
		for _, h2c := range []bool{false, true} {
			hc := protoClient(h2c)
			get := func(path string) (string, error) {
				resp, err := hc.Get("http://" + addr + path)
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return string(b), err
			}
			if body, err := get("/stream"); err != nil || body != "late" {
				t.Fatalf("h2c %v: stream got %q, %v; want it to outlive the write timeout", h2c, body, err)
			}
			if body, err := get("/plain"); err == nil && body == "late" {
				t.Fatalf("h2c %v: a plain handler outlived the write timeout: the test shows nothing", h2c)
			}
		}
	})
}

// The shared budget: pages wait for it up to the stall timeout, then end
// with ErrStreamBusy (counted); it never goes over its limit.
func TestStreamsBudget(t *testing.T) {
	s := NewStreams(100*time.Millisecond, StreamPageBytes)
	reg := prometheus.NewRegistry()
	s.register(reg)
	ctx := context.Background()
	if _, err := s.reserve(ctx, StreamPageBytes/2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.reserve(ctx, StreamPageBytes); !errors.Is(err, ErrStreamBusy) {
		t.Fatalf("a page beyond the budget: %v, want ErrStreamBusy", err)
	}
	// A page waiting for bytes gets them when they come back.
	got := make(chan error, 1)
	go func() { _, err := s.reserve(ctx, StreamPageBytes); got <- err }()
	time.Sleep(20 * time.Millisecond)
	s.unreserve(StreamPageBytes / 2)
	if err := <-got; err != nil {
		t.Fatalf("a waiting page did not get the bytes given back: %v", err)
	}
	// One page larger than the whole budget waits for all of it.
	s.unreserve(StreamPageBytes)
	if n, err := s.reserve(ctx, 3*StreamPageBytes); err != nil || n != StreamPageBytes {
		t.Fatalf("an oversized page took %d, %v", n, err)
	}
	s.unreserve(StreamPageBytes)
	if s.Peak() > s.Limit() || s.Buffered() != 0 {
		t.Fatalf("peak %d over limit %d, or %d still reserved", s.Peak(), s.Limit(), s.Buffered())
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	busy := -1.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "surge_stream_ended_total" && m.GetLabel()[0].GetValue() == EndBusy {
				busy = m.GetCounter().GetValue()
			}
		}
	}
	if busy != 1 || s.Ended(EndBusy) != 1 {
		t.Fatalf("surge_stream_ended_total{reason=server_busy} = %v, Ended = %d; want 1", busy, s.Ended(EndBusy))
	}
}

func TestStreamLimitsResolve(t *testing.T) {
	for _, l := range []Limits{{StallTimeout: -1}, {StreamBuffer: -1}, {StreamBuffer: StreamPageBytes - 1}, {WriteTimeout: -1}} {
		if _, err := l.Resolve(); err == nil {
			t.Errorf("%+v resolved", l)
		}
	}
	l, err := Limits{}.Resolve()
	if err != nil || l.StallTimeout != DefaultStallTimeout || l.StreamBuffer != DefaultStreamBuffer || l.WriteTimeout != DefaultWriteTimeout {
		t.Fatalf("defaults: %+v %v", l, err)
	}
}
