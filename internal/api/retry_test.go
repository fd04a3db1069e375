package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/surge-run/surge/internal/engine"
)

func TestRetryDelay(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		0: time.Second, 300 * time.Millisecond: time.Second,
		2500*time.Millisecond + 1: 2501 * time.Millisecond, 7 * time.Second: 7 * time.Second,
	} {
		if got := RetryDelay(d); got != want {
			t.Errorf("RetryDelay(%v) = %v, want %v", d, got, want)
		}
	}
}

// checkGRPCRetry asserts err is code carrying delay three ways: the
// RetryInfo detail, the pushback header and Retry-After.
func checkGRPCRetry(t *testing.T, what string, err error, code connect.Code, delay time.Duration) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: %v; want %v", what, err, code)
	}
	if got, ok := GRPCRetryDelay(err); !ok || got != delay {
		t.Errorf("%s: RetryInfo delay %v (present %v); want %v", what, got, ok, delay)
	}
	var ce *connect.Error
	errors.As(err, &ce)
	if got := ce.Meta().Get(PushbackHeader); got != strconv.FormatInt(delay.Milliseconds(), 10) {
		t.Errorf("%s: %s %q; want %d", what, PushbackHeader, got, delay.Milliseconds())
	}
	if got := ce.Meta().Get(RetryAfterHeader); got != strconv.Itoa(RetryAfterSeconds(delay)) {
		t.Errorf("%s: Retry-After %q; want %d", what, got, RetryAfterSeconds(delay))
	}
}

// predicted is an overload predicting a wait, as the engine's are.
type predicted struct{ wait time.Duration }

func (p predicted) Error() string             { return "overloaded" }
func (p predicted) Unwrap() error             { return engine.ErrOverloaded }
func (p predicted) RetryAfter() time.Duration { return p.wait }

// TestGRPCEngineOverloadCarriesDelay: a partition's overload refusal over
// gRPC carries its predicted wait, as HTTP's 429 does in Retry-After.
func TestGRPCEngineOverloadCarriesDelay(t *testing.T) {
	err := GRPCEngineError(predicted{3200 * time.Millisecond})
	checkGRPCRetry(t, "overloaded", err, connect.CodeResourceExhausted, 3200*time.Millisecond)
	// Relayed from another node, the prediction is lost: the floor.
	err = GRPCEngineError(engine.ErrOverloaded)
	checkGRPCRetry(t, "overloaded without a prediction", err, connect.CodeResourceExhausted, MinRetryDelay)
	// A partition between owners, or an outcome lost with its owner, is
	// a second's wait over gRPC as over HTTP (503, Retry-After 1).
	for _, e := range []error{engine.ErrNotOwner, engine.ErrOutcomeUnknown, fmt.Errorf("relayed: %w", engine.ErrNotOwner)} {
		checkGRPCRetry(t, e.Error(), GRPCEngineError(e), connect.CodeUnavailable, MinRetryDelay)
	}
}

// h2cClient speaks cleartext HTTP/2, as gRPC clients do.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// TestWaitingRoomRefusesRPCInItsProtocol: a gRPC or Connect call refused
// by a full waiting room is the protocol's UNAVAILABLE carrying the
// predicted wait (RetryInfo, pushback, Retry-After), not a JSON 503 that a
// gRPC client reads as a bare UNAVAILABLE.
func TestWaitingRoomRefusesRPCInItsProtocol(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		h := newOrderHandler()
		s, addr := startServer(t, h, Limits{MaxInflight: 1, WaitingRoom: 1, MaxWait: time.Hour}, prometheus.NewRegistry())
		s.inflight.fastNs.Store(int64(2 * time.Second))
		s.inflight.grants = 1 << 20
		base := "http://" + addr
		out := make(chan blockResult, 2)
		sendBlock(context.Background(), base, 0, out)
		awaitCond(t, "the first request in the handler", func() bool { return len(h.entered) == 1 })
		sendBlock(context.Background(), base, 1, out)
		awaitCond(t, "a waiter", func() bool { return s.inflight.queued.Load() == 1 })
		// A full room gives each refusal its ticket: the room (1) is half
		// drained after one release (2 s), the first ticket a release later
		// (4 s), each next one a release after that.
		for k, c := range []struct {
			name string
			opts []connect.ClientOption
		}{{"gRPC", []connect.ClientOption{connect.WithGRPC()}}, {"gRPC-Web", []connect.ClientOption{connect.WithGRPCWeb()}}, {"Connect", nil}} {
			cl := connect.NewClient[emptypb.Empty, emptypb.Empty](h2cClient(), base+"/test.Svc/Call", c.opts...)
			_, err := cl.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{}))
			want := time.Duration(4+2*k) * time.Second
			if connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("%s: %v; want unavailable", c.name, err)
			}
			// The ticket is counted from the refusal: the time since it was
			// given only shortens it, by far less than a second.
			got, ok := GRPCRetryDelay(err)
			if !ok || got > want || got <= want-3*time.Second {
				t.Errorf("%s: RetryInfo delay %v (present %v); want just under %v", c.name, got, ok, want)
			}
			var ce *connect.Error
			errors.As(err, &ce)
			if ms, _ := strconv.ParseInt(ce.Meta().Get(PushbackHeader), 10, 64); ms != got.Milliseconds() {
				t.Errorf("%s: %s %d ms; want %d (the RetryInfo delay)", c.name, PushbackHeader, ms, got.Milliseconds())
			}
			if ra := ce.Meta().Get(RetryAfterHeader); ra != strconv.Itoa(RetryAfterSeconds(got)) {
				t.Errorf("%s: Retry-After %q; want %d (the RetryInfo delay in whole seconds)", c.name, ra, RetryAfterSeconds(got))
			}
		}
		for range 2 {
			h.release <- struct{}{}
		}
		for range 2 {
			if r := <-out; r.err != nil || r.status != http.StatusOK {
				t.Fatalf("request %d: %v %d %q", r.i, r.err, r.status, r.body)
			}
		}
	})
}
