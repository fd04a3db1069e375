package sequencer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/api/apitest"
	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/seqpb"
	"github.com/surge-run/surge/internal/seqpb/seqpbconnect"
)

// Every command a sequencer route or call makes, built from the largest
// request the documented limits allow through the handlers' own checks
// and command building, fits one log entry with its envelope.
//
// The routes and calls not listed log nothing: GET /v1/groups,
// GET /v1/groups/{group}, the output reads and stream, gRPC GetGroup and
// Read, and the benchmark's GET /list/* are queries.
func TestEveryRouteCommandFitsALogEntry(t *testing.T) {
	a := &API{retention: MaxLease}
	group, id, proc := apitest.Longest(MaxNameLen), apitest.Longest(MaxIDLen), apitest.Longest(MaxIDLen)
	// The largest batch: MaxBatch messages with the longest ids whose
	// payloads (JSON strings) add up to the batch limit.
	per := MaxBatchPayloadBytes / MaxBatch
	batch := make([]publishBody, MaxBatch)
	for i := range batch {
		n := per
		if i == 0 {
			n = MaxBatchPayloadBytes - (MaxBatch-1)*per
		}
		batch[i] = publishBody{ID: &id, Seq: 1<<63 - 1, Payload: json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)}
	}
	one := publishBody{ID: &id, Seq: 1<<63 - 1, Payload: json.RawMessage(`"` + strings.Repeat("x", MaxPayloadBytes-2) + `"`)}
	seqs := make([]uint64, MaxLeaseBatch)
	for i := range seqs {
		seqs[i] = 1<<63 - 1 - uint64(i)
	}
	bench := apitest.Longest(MaxBenchName)
	for _, c := range []struct {
		route string
		build func() (engine.Command, string)
	}{
		{"POST /v1/groups/{group}/messages (one)", func() (engine.Command, string) {
			p, bad := a.publishOf(group, &one, -1)
			return &p, badMsg(bad) + checkName("group", group, MaxNameLen)
		}},
		{"POST /v1/groups/{group}/messages (batch), gRPC Publish", func() (engine.Command, string) {
			b, bad := a.publishBatchOf(group, batch)
			return b, badMsg(bad)
		}},
		{"POST /v1/groups/{group}/lease, gRPC Lease", func() (engine.Command, string) {
			return &Lease{Group: group, Processor: proc, Max: MaxLeaseBatch, LeaseNs: int64(MaxLease)}, checkName("processor", proc, MaxIDLen)
		}},
		{"POST /v1/groups/{group}/complete, gRPC Complete", func() (engine.Command, string) {
			return &CompleteBatch{Group: group, Processor: proc, Seqs: seqs}, ""
		}},
		{"POST /v1/groups/{group}/extend, gRPC Extend", func() (engine.Command, string) {
			return &Extend{Group: group, Processor: proc, LeaseNs: int64(MaxLease)}, ""
		}},
		{"POST /v1/groups/{group}/release", func() (engine.Command, string) { return &Release{Group: group, Processor: proc}, "" }},
		{"POST /v1/groups/{group}/consumers/{consumer}/commit, gRPC Commit", func() (engine.Command, string) {
			return &Commit{Group: group, Consumer: proc, Position: 1<<64 - 1}, checkName("consumer", proc, MaxIDLen)
		}},
		{"DELETE /v1/groups/{group}, DELETE /messages, gRPC DeleteGroup", func() (engine.Command, string) { return &DeleteGroup{Group: group}, "" }},
		{"POST /messages (its background batches)", func() (engine.Command, string) {
			b := &PublishBatch{}
			for i := MaxBenchMessages - MaxBatch + 1; i <= MaxBenchMessages; i++ {
				b.Msgs = append(b.Msgs, Publish{Group: bench, MsgID: bench + "-" + strconv.Itoa(i), RetentionNs: int64(a.retention)})
			}
			for _, m := range b.Msgs {
				if p := checkMessageID(m.MsgID); p != "" {
					return nil, p
				}
			}
			return b, checkName("name", bench, MaxBenchName)
		}},
	} {
		cmd, problem := c.build()
		if problem != "" {
			t.Fatalf("%s: the worst legal request was refused: %s", c.route, problem)
		}
		b, err := cmd.AppendBinary(nil)
		if err != nil {
			t.Fatalf("%s: %v", c.route, err)
		}
		if len(b) > api.MaxCommandBytes || len(b)+api.EnvelopeReserve > cmdlog.MaxEntryBytes {
			t.Errorf("%s: the worst legal request makes a %d-byte command; a log entry holds %d with its envelope", c.route, len(b), cmdlog.MaxEntryBytes)
		}
		t.Logf("%s: %d bytes at most", c.route, len(b))
	}
}

func badMsg(b *badInput) string {
	if b == nil {
		return ""
	}
	return b.msg
}

// newBothServer serves the HTTP routes and the gRPC service of one API.
func newBothServer(t testing.TB) (*httptest.Server, seqpbconnect.SequencerServiceClient) {
	t.Helper()
	hub := NewHub(0)
	eng := openAPIEngine(t, func(_ int, wl uint8, v any) {
		if wl == WorkloadID {
			hub.Notify(v)
		}
	})
	return serveBoth(t, eng, NewAPI(eng, hub))
}

// A gRPC Publish of 17 messages of ~1 MB, each within the payload limit,
// made one 17 MB log entry that stopped the node. It is refused as too
// large, naming the limit and the size, and nothing is published; the
// same over HTTP, where the body limit refuses it first.
func TestPublishOverBatchTotal(t *testing.T) {
	srv, c := newBothServer(t)
	ctx := gctx(t)
	payload := []byte(`"` + strings.Repeat("x", 1_000_000-2) + `"`)
	msgs := make([]*seqpb.PublishMessage, 17)
	for i := range msgs {
		msgs[i] = &seqpb.PublishMessage{Payload: payload}
	}
	_, err := c.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: "big", Messages: msgs}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "17000000") || !strings.Contains(err.Error(), strconv.Itoa(MaxBatchPayloadBytes)) {
		t.Fatalf("17 × 1,000,000 bytes over gRPC: %v, want RESOURCE_EXHAUSTED naming 17000000 bytes and the limit", err)
	}
	var body bytes.Buffer
	body.WriteString(`{"messages":[`)
	for i := range 17 {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"payload":`)
		body.Write(payload)
		body.WriteByte('}')
	}
	body.WriteString(`]}`)
	if st, b := call(t, srv, "POST", "/v1/groups/big/messages", body.String()); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("17 × 1,000,000 bytes over HTTP: %d %s, want 413", st, b)
	}
	if _, err := c.GetGroup(ctx, connect.NewRequest(&seqpb.GetGroupRequest{Group: "big"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("after the refusals the group exists: %v", err)
	}
	// At the limit it is one batch.
	msgs = msgs[:8]
	for i := range msgs {
		msgs[i] = &seqpb.PublishMessage{Payload: []byte(`"` + strings.Repeat("x", MaxBatchPayloadBytes/8-2) + `"`)}
	}
	if _, err := c.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: "big", Messages: msgs})); err != nil {
		t.Fatalf("a batch of exactly %d payload bytes: %v", MaxBatchPayloadBytes, err)
	}
}

// Values no sequencer field takes: control characters, bidi controls,
// invalid UTF-8, and for names, paths.
var (
	badText = map[string]string{
		"tab": "a\tb", "NUL": "a\x00b", "DEL": "a\x7fb", "C1": "a\u0085b", "RLO": "a\u202eb", "PDI": "a\u2069b", "bad UTF-8": "a\xffb",
	}
	badPath = map[string]string{"parent path": "../x", "slash": "a/b", "backslash": `a\b`, "dot dot": "a..b"}
	// Payloads HTTP refuses: the body is JSON, so a payload's text follows
	// the body's rule, and no bidi control.
	badPayloads = map[string]string{
		"bad UTF-8 in a string": "\"a\xffb\"",
		"escaped NUL":           `"a\u0000b"`,
		"escaped newline":       `{"k":"a\nb"}`,
		"raw RLO":               "\"a\u202eb\"",
		"escaped RLO":           `["a\u202Eb"]`,
		"escaped LRI in a key":  `{"\u2066k":1}`,
	}
)

// jsonString writes s as a JSON string with its bytes as they are (no
// replacement of invalid UTF-8, control characters escaped).
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			b.WriteString(`\u00` + strconv.FormatUint(uint64(c)>>4, 16) + strconv.FormatUint(uint64(c)&15, 16))
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// The same bad value gets 400 over HTTP and INVALID_ARGUMENT over gRPC,
// in every field, and nothing is created.
func TestFieldRulesAcrossTransports(t *testing.T) {
	srv, c := newBothServer(t)
	ctx := gctx(t)
	type field struct {
		name  string
		http  func(v string) (int, string)
		grpc  func(v string) error
		names bool // the name rule: no paths either
	}
	post := func(path, body string) (int, string) { return call(t, srv, "POST", path, body) }
	fields := []field{
		{"group", func(v string) (int, string) {
			return post("/v1/groups/"+url.PathEscape(v)+"/messages", `{"payload":1}`)
		}, func(v string) error {
			_, err := c.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: v, Messages: []*seqpb.PublishMessage{{Payload: []byte("1")}}}))
			return err
		}, true},
		{"message id", func(v string) (int, string) {
			return post("/v1/groups/g/messages", `{"messages":[{"id":`+jsonString(v)+`}]}`)
		}, func(v string) error {
			_, err := c.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: "g", Messages: []*seqpb.PublishMessage{{Id: v}}}))
			return err
		}, false},
		{"processor", func(v string) (int, string) {
			return post("/v1/groups/g/lease", `{"processor":`+jsonString(v)+`}`)
		}, func(v string) error {
			_, err := c.Lease(ctx, connect.NewRequest(&seqpb.LeaseRequest{Group: "g", Processor: v}))
			return err
		}, true},
		{"consumer", func(v string) (int, string) {
			return post("/v1/groups/g/consumers/"+url.PathEscape(v)+"/commit", `{"position":0}`)
		}, func(v string) error {
			_, err := c.Commit(ctx, connect.NewRequest(&seqpb.CommitRequest{Group: "g", Consumer: v}))
			return err
		}, true},
		{"benchmark name", func(v string) (int, string) {
			return post("/messages", `{"name":`+jsonString(v)+`,"numberOfMessages":1}`)
		}, nil, true},
	}
	for _, f := range fields {
		vals := map[string]string{}
		for k, v := range badText {
			vals[k] = v
		}
		if f.names {
			for k, v := range badPath {
				vals[k] = v
			}
		}
		for what, v := range vals {
			if st, b := f.http(v); st != http.StatusBadRequest {
				t.Errorf("%s %s (%q) over HTTP: %d %s, want 400", f.name, what, v, st, b)
			}
			if f.grpc == nil || !utf8.ValidString(v) {
				// protobuf itself refuses a string field that is not
				// UTF-8, in the client before it is sent.
				continue
			}
			if err := f.grpc(v); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("%s %s (%q) over gRPC: %v, want INVALID_ARGUMENT", f.name, what, v, err)
			}
		}
	}
	for what, p := range badPayloads {
		if st, b := post("/v1/groups/g/messages", `{"payload":`+p+`}`); st != http.StatusBadRequest {
			t.Errorf("payload %s over HTTP: %d %s, want 400", what, st, b)
		}
		_, err := c.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: "g", Messages: []*seqpb.PublishMessage{{Payload: []byte(p)}}}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("payload %s over gRPC: %v, want INVALID_ARGUMENT", what, err)
		}
	}
	if st, b := call(t, srv, "GET", "/v1/groups", ""); st != 200 || b != `{"groups":[]}`+"\n" {
		t.Errorf("groups after the refusals: %d %s, want none", st, b)
	}
	// A benchmark name whose ids would be too long is refused at once.
	if st, b := post("/messages", `{"name":"`+strings.Repeat("n", MaxBenchName+1)+`","numberOfMessages":1}`); st != http.StatusBadRequest {
		t.Errorf("benchmark name of %d bytes: %d %s, want 400", MaxBenchName+1, st, b)
	}
}

// verdictServer is one server for a fuzz target's inputs.
type verdictServer struct {
	srv *httptest.Server
	c   seqpbconnect.SequencerServiceClient
}

// verdict reads an HTTP status and a gRPC error as accepted (true),
// refused as bad input (false), or neither (ok false: another outcome).
func httpVerdict(st int) (accepted, ok bool) {
	switch {
	case st == http.StatusOK || st == http.StatusCreated:
		return true, true
	case st == http.StatusBadRequest:
		return false, true
	}
	return false, false
}

func grpcVerdict(err error) (accepted, ok bool) {
	switch connect.CodeOf(err) {
	case 0:
		return err == nil, err == nil
	case connect.CodeInvalidArgument:
		return false, true
	}
	return false, false
}

// FuzzNameVerdict: a group, processor or consumer name and a message id
// get the same verdict over HTTP (in the path or the JSON body) and over
// gRPC; an accepted one follows its field's rule (printable; names no
// path).
func FuzzNameVerdict(f *testing.F) {
	for _, s := range append([]string{"g", "p-1", "é", "🎫", "a.b", ".", "..", "a b", "%2F", "?x", "#"}, mapValues(badText, badPath)...) {
		f.Add(s)
	}
	srv, c := newBothServer(f)
	vs := &verdictServer{srv, c}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" || !utf8.ValidString(s) {
			return // no path segment; protobuf refuses it in the client
		}
		ctx := gctx(t)
		type field struct {
			name string
			http func() (int, string)
			grpc func() error
			rule func(string) string
		}
		name := func(s string) string { return api.CheckName(s, MaxIDLen) }
		for _, f := range []field{
			{"group", func() (int, string) {
				return call(t, vs.srv, "POST", "/v1/groups/"+url.PathEscape(s)+"/lease", `{"processor":"p"}`)
			}, func() error {
				_, err := vs.c.Lease(ctx, connect.NewRequest(&seqpb.LeaseRequest{Group: s, Processor: "p"}))
				return err
			}, func(s string) string { return api.CheckName(s, MaxNameLen) }},
			{"processor", func() (int, string) {
				return call(t, vs.srv, "POST", "/v1/groups/g/lease", `{"processor":`+jsonString(s)+`}`)
			}, func() error {
				_, err := vs.c.Lease(ctx, connect.NewRequest(&seqpb.LeaseRequest{Group: "g", Processor: s}))
				return err
			}, name},
			{"consumer", func() (int, string) {
				return call(t, vs.srv, "POST", "/v1/groups/g/consumers/"+url.PathEscape(s)+"/commit", `{"position":0}`)
			}, func() error {
				_, err := vs.c.Commit(ctx, connect.NewRequest(&seqpb.CommitRequest{Group: "g", Consumer: s}))
				return err
			}, name},
			{"message id", func() (int, string) {
				return call(t, vs.srv, "POST", "/v1/groups/g/messages", `{"messages":[{"id":`+jsonString(s)+`}]}`)
			}, func() error {
				_, err := vs.c.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: "g", Messages: []*seqpb.PublishMessage{{Id: s}}}))
				return err
			}, func(s string) string { return api.CheckID(s, 1, MaxIDLen) }},
		} {
			st, b := f.http()
			err := f.grpc()
			h, hok := httpVerdict(st)
			g, gok := grpcVerdict(err)
			if hok && gok && h != g {
				t.Fatalf("%s %q: HTTP %d %s, gRPC %v", f.name, s, st, b, err)
			}
			if h || g {
				if p := f.rule(s); p != "" {
					t.Fatalf("%s %q accepted (HTTP %d, gRPC %v), but it %s", f.name, s, st, err, p)
				}
			}
		}
	})
}

// FuzzPayloadVerdict: a payload gets the same verdict over HTTP (inline
// JSON) and over gRPC (bytes); what is not a JSON value is refused by
// gRPC, and what is accepted is JSON text.
func FuzzPayloadVerdict(f *testing.F) {
	for _, s := range append([]string{`1`, `null`, `"x"`, `{"k":[1,"é"]}`, ` 1 `, `1,"seq":5`, `"\ud83c\udfab"`, `{`, `x`}, mapValues(badPayloads)...) {
		f.Add([]byte(s))
	}
	srv, c := newBothServer(f)
	vs := &verdictServer{srv, c}
	f.Fuzz(func(t *testing.T, p []byte) {
		if len(p) == 0 || len(p) > 1<<16 {
			return // empty is no payload over gRPC, and no JSON over HTTP
		}
		ctx := gctx(t)
		_, err := vs.c.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: "g", Messages: []*seqpb.PublishMessage{{Payload: p}}}))
		g, gok := grpcVerdict(err)
		if g && api.CheckJSONText(p) != "" {
			t.Fatalf("gRPC accepted the payload %q: %s", p, api.CheckJSONText(p))
		}
		if !json.Valid(p) {
			if g {
				t.Fatalf("gRPC accepted %q, which is not JSON", p)
			}
			return // spliced into a body it is other JSON, or none
		}
		st, b := call(t, vs.srv, "POST", "/v1/groups/g/messages", `{"payload":`+string(p)+`}`)
		h, hok := httpVerdict(st)
		if hok && gok && h != g {
			t.Fatalf("payload %q: HTTP %d %s, gRPC %v", p, st, b, err)
		}
	})
}

func mapValues(ms ...map[string]string) []string {
	var out []string
	for _, m := range ms {
		for _, v := range m {
			out = append(out, v)
		}
	}
	return out
}

// The largest legal publish over gRPC and over HTTP (a body at its 8 MiB
// limit), through the handlers to the log: the entries the log receives
// are within cmdlog.MaxEntryBytes.
func TestWorstPublishFitsALogEntry(t *testing.T) {
	dir := t.TempDir()
	el := &apitest.EntryLog{Log: enginetest.OpenWAL(t, dir, enginePartitions)}
	eng := enginetest.OpenEngine(t, dir, engine.Options{Partitions: enginePartitions, Log: el}, &Workload{})
	srv, c := serveBoth(t, eng, NewAPI(eng, NewHub(0)))
	check := func(route string) {
		t.Helper()
		n := el.TakeMax()
		if n == 0 || n > cmdlog.MaxEntryBytes {
			t.Fatalf("%s: largest log entry %d bytes, want 1 to %d", route, n, cmdlog.MaxEntryBytes)
		}
		t.Logf("%s: largest entry %d bytes", route, n)
	}
	group := apitest.Longest(MaxNameLen)
	per := MaxBatchPayloadBytes / MaxBatch
	msgs := make([]*seqpb.PublishMessage, MaxBatch)
	for i := range msgs {
		msgs[i] = &seqpb.PublishMessage{Id: fmt.Sprintf("g%05d", i) + apitest.Longest(MaxIDLen-6), Payload: []byte(`"` + strings.Repeat("x", per-2) + `"`)}
	}
	if _, err := c.Publish(gctx(t), connect.NewRequest(&seqpb.PublishRequest{Group: group, Messages: msgs})); err != nil {
		t.Fatal(err)
	}
	check("gRPC Publish")
	// The HTTP batch whose body is just under its limit.
	var body strings.Builder
	body.WriteString(`{"messages":[`)
	room := maxBatchBody - MaxBatch*len(`{"id":"","payload":""},`) - MaxBatch*MaxIDLen - 16
	for i := range MaxBatch {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"id":"h%05d%s","payload":"%s"}`, i, strings.Repeat("q", MaxIDLen-6), strings.Repeat("x", room/MaxBatch))
	}
	body.WriteString(`]}`)
	st, b := call(t, srv, "POST", "/v1/groups/"+url.PathEscape(group)+"/messages", body.String())
	if st != http.StatusCreated {
		t.Fatalf("HTTP batch of %d bytes: %d %.300s", body.Len(), st, b)
	}
	check(fmt.Sprintf("POST /v1/groups/{group}/messages (a %d-byte body)", body.Len()))
}
