package jaegertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// WaitTimeout bounds Wait and WaitFind: a server exports its spans in
// batches (Env asks for one every ExportDelay) and Jaeger stores them
// soon after, but a busy 2-core machine can be slow.
const WaitTimeout = 60 * time.Second

// pollInterval is how often Wait and WaitFind ask Jaeger again.
const pollInterval = 200 * time.Millisecond

// queryTimeout bounds one call to the query API.
const queryTimeout = 10 * time.Second

// ErrNotFound is Trace's error when Jaeger has no such trace (yet).
var ErrNotFound = errors.New("trace not found")

// Span is one span as Jaeger stored it.
type Span struct {
	TraceID, SpanID string
	// ParentID is the parent span's id (a CHILD_OF reference), "" for a
	// root span.
	ParentID string
	// Links are the span's OTLP links (FOLLOWS_FROM references).
	Links []Ref
	Name  string
	// Service is the resource's service.name; Resource its other
	// attributes (Jaeger's process tags, e.g. service.instance.id).
	Service  string
	Resource map[string]any
	// Attrs are the span's attributes plus what Jaeger derives from OTLP
	// fields: span.kind ("server"), otel.status_code ("ERROR"),
	// otel.scope.name.
	Attrs    map[string]any
	Start    time.Time
	Duration time.Duration
}

// Ref names a span, maybe in another trace.
type Ref struct{ TraceID, SpanID string }

// Attr is attribute key as text ("" when absent), whatever its type.
func (s Span) Attr(key string) string {
	v, ok := s.Attrs[key]
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

// Trace is one trace's spans, by start time.
type Trace struct {
	ID    string
	Spans []Span
}

// Named returns the trace's spans called name.
func (tr Trace) Named(name string) []Span {
	var out []Span
	for _, s := range tr.Spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// One returns the one span called name, failing t if there is none or
// more than one.
func (tr Trace) One(t testing.TB, name string) Span {
	t.Helper()
	got := tr.Named(name)
	if len(got) != 1 {
		t.Fatalf("trace %s: %d spans named %q, want 1; spans: %s", tr.ID, len(got), name, tr)
	}
	return got[0]
}

// Span returns the span with id.
func (tr Trace) Span(id string) (Span, bool) {
	for _, s := range tr.Spans {
		if s.SpanID == id {
			return s, true
		}
	}
	return Span{}, false
}

// Children returns the spans whose parent is parent.
func (tr Trace) Children(parent Span) []Span {
	var out []Span
	for _, s := range tr.Spans {
		if s.ParentID == parent.SpanID {
			out = append(out, s)
		}
	}
	return out
}

// Has reports whether the trace has a span called each of names.
func (tr Trace) Has(names ...string) bool {
	return len(tr.missing(names)) == 0
}

func (tr Trace) missing(names []string) []string {
	var out []string
	for _, n := range names {
		if len(tr.Named(n)) == 0 {
			out = append(out, n)
		}
	}
	return out
}

// String lists the spans as name(span id <- parent id), for failure
// messages.
func (tr Trace) String() string {
	parts := make([]string, len(tr.Spans))
	for i, s := range tr.Spans {
		parts[i] = fmt.Sprintf("%s(%s<-%s)", s.Name, s.SpanID, s.ParentID)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Trace fetches trace id (32 hex digits) from /api/traces/{id};
// ErrNotFound when Jaeger has none of its spans.
func (j *Jaeger) Trace(ctx context.Context, id string) (Trace, error) {
	traces, err := j.get(ctx, "/api/traces/"+url.PathEscape(id))
	if err != nil {
		return Trace{}, err
	}
	if len(traces) != 1 {
		return Trace{}, fmt.Errorf("/api/traces/%s: %d traces, want 1", id, len(traces))
	}
	return traces[0], nil
}

// Query selects traces as Jaeger's search does.
type Query struct {
	Service   string // required
	Operation string // a span name; "" for any
	// Tags are span attributes every trace found has on some span.
	Tags  map[string]string
	Limit int // 0: Jaeger's default (100)
}

// Find searches /api/traces?service=…&operation=… for the traces of the
// last hour.
func (j *Jaeger) Find(ctx context.Context, q Query) ([]Trace, error) {
	v := url.Values{"service": {q.Service}}
	if q.Operation != "" {
		v.Set("operation", q.Operation)
	}
	if len(q.Tags) > 0 {
		b, err := json.Marshal(q.Tags)
		if err != nil {
			return nil, err
		}
		v.Set("tags", string(b))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	v.Set("start", strconv.FormatInt(time.Now().Add(-time.Hour).UnixMicro(), 10))
	traces, err := j.get(ctx, "/api/traces?"+v.Encode())
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return traces, err
}

// Wait polls Trace until the trace has a span called each of names (at
// least one span when names is empty), for up to WaitTimeout, and fails t
// saying what is missing when it does not.
func (j *Jaeger) Wait(t testing.TB, id string, names ...string) Trace {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		tr, err := j.Trace(ctx, id)
		cancel()
		if err == nil && len(tr.Spans) > 0 && tr.Has(names...) {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaegertest: trace %s after %v: err %v, missing %v among %s", id, WaitTimeout, err, tr.missing(names), tr)
		}
		time.Sleep(pollInterval)
	}
}

// WaitFind polls Find until a trace found has a span called each of names
// (at least one span when names is empty), for up to WaitTimeout, and
// returns the first such trace.
func (j *Jaeger) WaitFind(t testing.TB, q Query, names ...string) Trace {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		traces, err := j.Find(ctx, q)
		cancel()
		for _, tr := range traces {
			if len(tr.Spans) > 0 && tr.Has(names...) {
				return tr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaegertest: no trace of %+v with spans %v after %v (err %v); found %v", q, names, WaitTimeout, err, traces)
		}
		time.Sleep(pollInterval)
	}
}

// get calls the query API and decodes its traces.
func (j *Jaeger) get(ctx context.Context, path string) ([]Trace, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, ErrNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	var r apiResponse
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("GET %s: %v", path, err)
	}
	if len(r.Errors) > 0 {
		return nil, fmt.Errorf("GET %s: %s", path, r.Errors[0].Msg)
	}
	out := make([]Trace, len(r.Data))
	for i, at := range r.Data {
		out[i] = at.trace()
	}
	return out, nil
}

// The query API's JSON (Jaeger's v1 UI model).
type apiResponse struct {
	Data   []apiTrace `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

type apiTrace struct {
	TraceID   string                `json:"traceID"`
	Spans     []apiSpan             `json:"spans"`
	Processes map[string]apiProcess `json:"processes"`
}

type apiSpan struct {
	TraceID       string   `json:"traceID"`
	SpanID        string   `json:"spanID"`
	OperationName string   `json:"operationName"`
	References    []apiRef `json:"references"`
	StartTime     int64    `json:"startTime"` // µs since the epoch
	Duration      int64    `json:"duration"`  // µs
	Tags          []apiKV  `json:"tags"`
	ProcessID     string   `json:"processID"`
}

type apiRef struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

type apiKV struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

type apiProcess struct {
	ServiceName string  `json:"serviceName"`
	Tags        []apiKV `json:"tags"`
}

func (at apiTrace) trace() Trace {
	tr := Trace{ID: traceID(at.TraceID)}
	for _, as := range at.Spans {
		p := at.Processes[as.ProcessID]
		s := Span{
			TraceID: traceID(as.TraceID), SpanID: spanID(as.SpanID), Name: as.OperationName,
			Service: p.ServiceName, Resource: kvs(p.Tags), Attrs: kvs(as.Tags),
			Start: time.UnixMicro(as.StartTime), Duration: time.Duration(as.Duration) * time.Microsecond,
		}
		for _, r := range as.References {
			switch {
			case r.RefType == "CHILD_OF" && s.ParentID == "":
				s.ParentID = spanID(r.SpanID)
			default:
				s.Links = append(s.Links, Ref{TraceID: traceID(r.TraceID), SpanID: spanID(r.SpanID)})
			}
		}
		tr.Spans = append(tr.Spans, s)
	}
	sort.SliceStable(tr.Spans, func(a, b int) bool { return tr.Spans[a].Start.Before(tr.Spans[b].Start) })
	return tr
}

// kvs turns tags into Go values: string, bool, int64 or float64.
func kvs(tags []apiKV) map[string]any {
	m := make(map[string]any, len(tags))
	for _, kv := range tags {
		m[kv.Key] = kv.Value
		n, ok := kv.Value.(json.Number)
		if !ok {
			continue
		}
		if i, err := n.Int64(); err == nil && kv.Type == "int64" {
			m[kv.Key] = i
		} else if f, err := n.Float64(); err == nil {
			m[kv.Key] = f
		}
	}
	return m
}

// Jaeger prints ids without leading zeros; W3C and OTLP write them whole.
func traceID(s string) string { return pad(s, 32) }
func spanID(s string) string  { return pad(s, 16) }

func pad(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return strings.Repeat("0", n-len(s)) + s
}
