package sequencer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/seqpb"
	"github.com/surge-run/surge/internal/seqpb/seqpbconnect"
)

// newGRPC serves the gRPC service over a real engine and log, over h2c
// as gRPC clients talk, with the hub fed by the engine's notes.
func newGRPC(t *testing.T) (seqpbconnect.SequencerServiceClient, *API) {
	t.Helper()
	hub := NewHub(0)
	eng := openAPIEngine(t, func(_ int, wl uint8, v any) {
		if wl == WorkloadID {
			hub.Notify(v)
		}
	})
	a := NewAPI(eng, hub)
	_, c := serveBoth(t, eng, a)
	return c, a
}

// serveBoth serves a's HTTP routes and gRPC service over HTTP/1.1 and
// h2c, shuts a and eng down at the end, and returns the server and a
// gRPC client of it.
func serveBoth(t testing.TB, eng *engine.Engine, a *API) (*httptest.Server, seqpbconnect.SequencerServiceClient) {
	mux := http.NewServeMux()
	a.Register(mux, api.NewMetrics(prometheus.NewRegistry()))
	mux.Handle(a.GRPCHandler())
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() { a.Shutdown(); srv.Close(); eng.Close() })
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	return srv, seqpbconnect.NewSequencerServiceClient(hc, srv.URL, connect.WithGRPC())
}

// gctx bounds a test's calls together: a guard against a hang, generous
// enough for megabytes forwarded between nodes under -race on a busy
// machine (15 s once was not).
func gctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func gPublish(t *testing.T, c seqpbconnect.SequencerServiceClient, group string, msgs ...*seqpb.PublishMessage) []uint64 {
	t.Helper()
	res, err := c.Publish(gctx(t), connect.NewRequest(&seqpb.PublishRequest{Group: group, Messages: msgs}))
	if err != nil {
		t.Fatalf("Publish(%s): %v", group, err)
	}
	return res.Msg.Seqs
}

func gLease(t *testing.T, c seqpbconnect.SequencerServiceClient, group string, max, waitMs int32) []uint64 {
	t.Helper()
	res, err := c.Lease(gctx(t), connect.NewRequest(&seqpb.LeaseRequest{Group: group, Processor: "p1", Max: max, WaitMs: waitMs}))
	if err != nil {
		t.Fatalf("Lease(%s): %v", group, err)
	}
	var seqs []uint64
	for _, m := range res.Msg.Messages {
		seqs = append(seqs, m.Seq)
	}
	return seqs
}

func gComplete(t *testing.T, c seqpbconnect.SequencerServiceClient, group string, seqs ...uint64) uint64 {
	t.Helper()
	res, err := c.Complete(gctx(t), connect.NewRequest(&seqpb.CompleteRequest{Group: group, Processor: "p1", Seqs: seqs}))
	if err != nil {
		t.Fatalf("Complete(%s, %v): %v", group, seqs, err)
	}
	return res.Msg.Released
}

func gGroup(t *testing.T, c seqpbconnect.SequencerServiceClient, group string) *seqpb.GetGroupResponse {
	t.Helper()
	res, err := c.GetGroup(gctx(t), connect.NewRequest(&seqpb.GetGroupRequest{Group: group}))
	if err != nil {
		t.Fatalf("GetGroup(%s): %v", group, err)
	}
	return res.Msg
}

// reader receives a Read stream on a goroutine, so a test can wait for
// messages with a timeout and tell that none came.
type reader struct {
	msgs chan *seqpb.Message
	end  chan error
}

func startRead(t *testing.T, ctx context.Context, c seqpbconnect.SequencerServiceClient, group string, after uint64) *reader {
	t.Helper()
	s, err := c.Read(ctx, connect.NewRequest(&seqpb.ReadRequest{Group: group, After: after}))
	if err != nil {
		t.Fatalf("Read(%s): %v", group, err)
	}
	r := &reader{msgs: make(chan *seqpb.Message, 100), end: make(chan error, 1)}
	go func() {
		defer s.Close()
		for s.Receive() {
			r.msgs <- s.Msg().Message
		}
		r.end <- s.Err()
	}()
	return r
}

// next returns the next n messages' seqs, failing after a few seconds.
func (r *reader) next(t *testing.T, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	timeout := time.After(5 * time.Second)
	for len(seqs) < n {
		select {
		case m := <-r.msgs:
			seqs = append(seqs, m.Seq)
		case err := <-r.end:
			t.Fatalf("stream ended after %v: %v", seqs, err)
		case <-timeout:
			t.Fatalf("got %v, want %d messages", seqs, n)
		}
	}
	return seqs
}

func (r *reader) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case m := <-r.msgs:
		t.Fatalf("got seq %d, want nothing", m.Seq)
	case <-time.After(d):
	}
}

// Publish → lease → complete out of order → Read sees the messages in
// sequence order with their ids, payloads and stage times; a repeated
// publish by id changes nothing.
func TestGRPCPublishLeaseCompleteRead(t *testing.T) {
	c, _ := newGRPC(t)
	seqs := gPublish(t, c, "g", &seqpb.PublishMessage{Id: "a", Payload: []byte(`{"n":1}`)},
		&seqpb.PublishMessage{Id: "b", Payload: []byte(`2`)}, &seqpb.PublishMessage{Payload: []byte(`"x"`)})
	if !slices.Equal(seqs, []uint64{1, 2, 3}) {
		t.Fatalf("seqs = %v, want [1 2 3]", seqs)
	}
	if again := gPublish(t, c, "g", &seqpb.PublishMessage{Id: "b", Payload: []byte(`2`)}); !slices.Equal(again, []uint64{2}) {
		t.Fatalf("repeated id b: seqs = %v, want [2]", again)
	}
	if got := gLease(t, c, "g", 10, 0); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("leased %v, want [1 2 3]", got)
	}
	if rel := gComplete(t, c, "g", 3, 2); rel != 0 {
		t.Fatalf("released %d with seq 1 unprocessed, want 0", rel)
	}
	if g := gGroup(t, c, "g"); g.Published != 3 || g.Waiting != 2 || g.Leased != 1 || g.Released != 0 || g.GapAt != 1 {
		t.Fatalf("group = %v, want 3 published, 2 waiting, 1 leased, gap at 1", g)
	}
	if rel := gComplete(t, c, "g", 1); rel != 3 {
		t.Fatalf("released %d, want 3", rel)
	}
	r := startRead(t, gctx(t), c, "g", 0)
	var got []*seqpb.Message
	for range 3 {
		select {
		case m := <-r.msgs:
			got = append(got, m)
		case err := <-r.end:
			t.Fatal(err)
		case <-time.After(5 * time.Second):
			t.Fatalf("got %d messages, want 3", len(got))
		}
	}
	for i, m := range got {
		if m.Seq != uint64(i+1) || m.Group != "g" || m.CreatedAt == nil || m.ProcessedAt == nil || m.ReleasedAt == nil {
			t.Errorf("message %d = %v", i, m)
		}
	}
	if got[0].Id != "a" || string(got[0].Payload) != `{"n":1}` || got[1].Id != "b" || got[2].Id == "" {
		t.Errorf("ids/payloads = %q %s, %q, %q", got[0].Id, got[0].Payload, got[1].Id, got[2].Id)
	}
	// Read from a position sends only what follows it.
	if seqs := startRead(t, gctx(t), c, "g", 2).next(t, 1); seqs[0] != 3 {
		t.Errorf("Read after 2 sent %v first, want 3", seqs)
	}
	if _, err := c.Commit(gctx(t), connect.NewRequest(&seqpb.CommitRequest{Group: "g", Consumer: "c1", Position: 2})); err != nil {
		t.Fatal(err)
	}
	if g := gGroup(t, c, "g"); len(g.Consumers) != 1 || g.Consumers[0].Name != "c1" || g.Consumers[0].Position != 2 || g.GapAt != 0 {
		t.Errorf("group after commit = %v", g)
	}
}

// A Read open on a group nobody published to follows releases as they
// happen; a missing client seq holds everything after it until filled;
// a Lease long poll wakes on a publish.
func TestGRPCReadFollowsAndGapHolds(t *testing.T) {
	c, _ := newGRPC(t)
	r := startRead(t, gctx(t), c, "cg", 0)

	leased := make(chan []uint64, 1)
	go func() {
		res, err := c.Lease(gctx(t), connect.NewRequest(&seqpb.LeaseRequest{Group: "cg", Processor: "p1", Max: 10, WaitMs: 10_000}))
		if err != nil {
			leased <- nil
			return
		}
		var s []uint64
		for _, m := range res.Msg.Messages {
			s = append(s, m.Seq)
		}
		leased <- s
	}()
	time.Sleep(50 * time.Millisecond) // let the lease wait first
	gPublish(t, c, "cg", &seqpb.PublishMessage{Id: "m1", Seq: 1}, &seqpb.PublishMessage{Id: "m3", Seq: 3})
	var first []uint64
	select {
	case first = <-leased:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Lease did not wake on the publish")
	}
	if len(first) == 0 {
		t.Fatal("the waiting Lease failed or got nothing")
	}
	if rest := gLease(t, c, "cg", 10, 0); len(first)+len(rest) != 2 {
		t.Fatalf("leased %v then %v, want seqs 1 and 3", first, rest)
	}
	gComplete(t, c, "cg", 1, 3)
	if got := r.next(t, 1); got[0] != 1 {
		t.Fatalf("stream sent %v, want 1", got)
	}
	r.none(t, 200*time.Millisecond)
	if g := gGroup(t, c, "cg"); g.Released != 1 || g.Waiting != 1 || g.GapAt != 2 || g.Published != 2 {
		t.Fatalf("group = %v, want released 1, seq 3 waiting behind the gap at 2", g)
	}
	gPublish(t, c, "cg", &seqpb.PublishMessage{Id: "m2", Seq: 2})
	if got := gLease(t, c, "cg", 10, 1000); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("leased %v, want [2]", got)
	}
	if rel := gComplete(t, c, "cg", 2); rel != 3 {
		t.Fatalf("released %d, want 3", rel)
	}
	if got := r.next(t, 2); !slices.Equal(got, []uint64{2, 3}) {
		t.Fatalf("stream sent %v, want [2 3]", got)
	}
}

func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// Bad input is refused with its code and changes nothing.
func TestGRPCBadInputs(t *testing.T) {
	c, _ := newGRPC(t)
	ctx := gctx(t)
	gPublish(t, c, "c", &seqpb.PublishMessage{Id: "one", Seq: 1}, &seqpb.PublishMessage{Id: "two", Seq: 2})
	gLease(t, c, "c", 1, 0) // seq 1 leased to p1
	gPublish(t, c, "s", &seqpb.PublishMessage{Id: "x"})
	pm := func(id string, seq uint64, payload string) *seqpb.PublishMessage {
		return &seqpb.PublishMessage{Id: id, Seq: seq, Payload: []byte(payload)}
	}
	pub := func(group string, msgs ...*seqpb.PublishMessage) error {
		_, err := c.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: group, Messages: msgs}))
		return err
	}
	many := make([]*seqpb.PublishMessage, MaxBatch+1)
	for i := range many {
		many[i] = pm("", 0, "")
	}
	cases := []struct {
		name string
		want connect.Code
		call func() error
	}{
		{"publish to no group name", connect.CodeInvalidArgument, func() error { return pub("", pm("", 0, "")) }},
		{"publish nothing", connect.CodeInvalidArgument, func() error { return pub("new") }},
		{"publish too many", connect.CodeInvalidArgument, func() error { return pub("new", many...) }},
		{"payload not JSON", connect.CodeInvalidArgument, func() error { return pub("new", pm("a", 0, "{"), pm("b", 0, "1")) }},
		{"payload too big", connect.CodeResourceExhausted, func() error {
			return pub("new", pm("a", 0, "1"), pm("b", 0, `"`+strings.Repeat("x", MaxPayloadBytes)+`"`))
		}},
		{"id too long", connect.CodeInvalidArgument, func() error { return pub("new", pm(strings.Repeat("i", MaxIDLen+1), 0, "")) }},
		{"modes mixed in a batch", connect.CodeInvalidArgument, func() error { return pub("new", pm("a", 0, ""), pm("b", 5, "")) }},
		{"server seqs to a client group", connect.CodeInvalidArgument, func() error { return pub("c", pm("new", 0, "")) }},
		{"seq taken by another id", connect.CodeAlreadyExists, func() error { return pub("c", pm("three", 3, ""), pm("other", 2, "")) }},
		{"seq repeated in a batch", connect.CodeAlreadyExists, func() error { return pub("c", pm("p", 7, ""), pm("q", 7, "")) }},
		{"lease without processor", connect.CodeInvalidArgument, func() error {
			_, err := c.Lease(ctx, connect.NewRequest(&seqpb.LeaseRequest{Group: "c"}))
			return err
		}},
		{"lease max too big", connect.CodeInvalidArgument, func() error {
			_, err := c.Lease(ctx, connect.NewRequest(&seqpb.LeaseRequest{Group: "c", Processor: "p", Max: MaxLeaseBatch + 1}))
			return err
		}},
		{"lease wait too long", connect.CodeInvalidArgument, func() error {
			_, err := c.Lease(ctx, connect.NewRequest(&seqpb.LeaseRequest{Group: "c", Processor: "p", WaitMs: int32(MaxWait.Milliseconds() + 1)}))
			return err
		}},
		{"lease_ms negative", connect.CodeInvalidArgument, func() error {
			_, err := c.Lease(ctx, connect.NewRequest(&seqpb.LeaseRequest{Group: "c", Processor: "p", LeaseMs: -1}))
			return err
		}},
		{"complete no seqs", connect.CodeInvalidArgument, func() error {
			_, err := c.Complete(ctx, connect.NewRequest(&seqpb.CompleteRequest{Group: "c", Processor: "p1"}))
			return err
		}},
		{"complete seq 0", connect.CodeInvalidArgument, func() error {
			_, err := c.Complete(ctx, connect.NewRequest(&seqpb.CompleteRequest{Group: "c", Processor: "p1", Seqs: []uint64{0}}))
			return err
		}},
		{"complete another's lease", connect.CodeFailedPrecondition, func() error {
			_, err := c.Complete(ctx, connect.NewRequest(&seqpb.CompleteRequest{Group: "c", Processor: "p2", Seqs: []uint64{1}}))
			return err
		}},
		{"complete a pending message", connect.CodeFailedPrecondition, func() error {
			_, err := c.Complete(ctx, connect.NewRequest(&seqpb.CompleteRequest{Group: "c", Processor: "p1", Seqs: []uint64{2}}))
			return err
		}},
		{"complete in no group", connect.CodeNotFound, func() error {
			_, err := c.Complete(ctx, connect.NewRequest(&seqpb.CompleteRequest{Group: "nope", Processor: "p1", Seqs: []uint64{1}}))
			return err
		}},
		{"complete no message", connect.CodeNotFound, func() error {
			_, err := c.Complete(ctx, connect.NewRequest(&seqpb.CompleteRequest{Group: "c", Processor: "p1", Seqs: []uint64{9}}))
			return err
		}},
		{"extend in no group", connect.CodeNotFound, func() error {
			_, err := c.Extend(ctx, connect.NewRequest(&seqpb.ExtendRequest{Group: "nope", Processor: "p1"}))
			return err
		}},
		{"extend lease too long", connect.CodeInvalidArgument, func() error {
			_, err := c.Extend(ctx, connect.NewRequest(&seqpb.ExtendRequest{Group: "c", Processor: "p1", LeaseMs: int32(MaxLease.Milliseconds() + 1)}))
			return err
		}},
		{"commit past released", connect.CodeInvalidArgument, func() error {
			_, err := c.Commit(ctx, connect.NewRequest(&seqpb.CommitRequest{Group: "c", Consumer: "k", Position: 1}))
			return err
		}},
		{"commit without consumer", connect.CodeInvalidArgument, func() error {
			_, err := c.Commit(ctx, connect.NewRequest(&seqpb.CommitRequest{Group: "c"}))
			return err
		}},
		{"read without group", connect.CodeInvalidArgument, func() error {
			s, err := c.Read(ctx, connect.NewRequest(&seqpb.ReadRequest{}))
			if err != nil {
				return err
			}
			defer s.Close()
			for s.Receive() {
			}
			return s.Err()
		}},
		{"get no group", connect.CodeNotFound, func() error {
			_, err := c.GetGroup(ctx, connect.NewRequest(&seqpb.GetGroupRequest{Group: "nope"}))
			return err
		}},
		{"delete no group", connect.CodeNotFound, func() error {
			_, err := c.DeleteGroup(ctx, connect.NewRequest(&seqpb.DeleteGroupRequest{Group: "nope"}))
			return err
		}},
	}
	beforeC, beforeS := gGroup(t, c, "c"), gGroup(t, c, "s")
	for _, tc := range cases {
		if got := codeOf(tc.call()); got != tc.want {
			t.Errorf("%s: code %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, g := range []string{"new", "nope", ""} {
		if _, err := c.GetGroup(ctx, connect.NewRequest(&seqpb.GetGroupRequest{Group: g})); g != "" && codeOf(err) != connect.CodeNotFound {
			t.Errorf("group %q exists after refused calls: %v", g, err)
		}
	}
	afterC, afterS := gGroup(t, c, "c"), gGroup(t, c, "s")
	if afterC.String() != beforeC.String() || afterS.String() != beforeS.String() {
		t.Errorf("refused calls changed groups:\n%v\n%v\nwant\n%v\n%v", afterC, afterS, beforeC, beforeS)
	}
	if got := gLease(t, c, "c", 10, 0); !slices.Equal(got, []uint64{2}) {
		t.Errorf("after refusals, leasable %v, want [2]", got)
	}
}

// Shutdown ends a Read stream and a waiting Lease at once with
// UNAVAILABLE, so the server's graceful shutdown does not wait for them.
func TestGRPCShutdownEndsWaits(t *testing.T) {
	c, a := newGRPC(t)
	r := startRead(t, gctx(t), c, "g", 0)
	leaseErr := make(chan error, 1)
	go func() {
		_, err := c.Lease(gctx(t), connect.NewRequest(&seqpb.LeaseRequest{Group: "g", Processor: "p", WaitMs: 60_000}))
		leaseErr <- err
	}()
	time.Sleep(100 * time.Millisecond)
	// The lease would wait 60 s and the Read for ever: ending within 20 s
	// (generous for a busy machine) means Shutdown ended them.
	a.Shutdown()
	giveUp := time.After(20 * time.Second)
	select {
	case err := <-r.end:
		if codeOf(err) != connect.CodeUnavailable {
			t.Errorf("Read ended with %v, want UNAVAILABLE", err)
		}
	case <-giveUp:
		t.Fatal("Read still open after Shutdown")
	}
	select {
	case err := <-leaseErr:
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
			t.Errorf("Lease ended with %v, want UNAVAILABLE", err)
		}
	case <-giveUp:
		t.Fatal("Lease still waiting after Shutdown")
	}
}
