package sequencer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
)

func (a *API) part(group string) int { return a.eng.PartitionOf(GroupKey(group)) }

// do applies cmd at the group's partition. If the engine failed or the
// machine refused the command, it has answered and returns that status.
func (a *API) do(ctx context.Context, w http.ResponseWriter, group string, cmd engine.Command) (*Result, int) {
	res, err := a.doRaw(ctx, group, cmd)
	if err != nil {
		return nil, engineError(w, err)
	}
	return res, refused(w, res)
}

func (a *API) doRaw(ctx context.Context, group string, cmd engine.Command) (*Result, error) {
	return engine.Do[*Result](ctx, a.eng, a.part(group), WorkloadID, cmd)
}

func (a *API) info(ctx context.Context, group string) (*Info, error) {
	return engine.Query[*Info](ctx, a.eng, a.part(group), WorkloadID, GroupInfo{Group: group})
}

func (a *API) read(ctx context.Context, group string, after uint64, limit int) (*Output, error) {
	return engine.Query[*Output](ctx, a.eng, a.part(group), WorkloadID, ReadOutput{Group: group, After: after, Limit: limit})
}

func engineError(w http.ResponseWriter, err error) int {
	return api.EngineError(w, err, "server is busy: nothing was done, retry after the Retry-After pause")
}

// status maps a refusal to its HTTP status (0 for a success).
func status(o Outcome) int {
	switch o {
	case OK, Created, Same:
		return 0
	case NotFound:
		return http.StatusNotFound
	case Invalid:
		return http.StatusBadRequest
	case Conflict:
		return http.StatusConflict
	case Exhausted:
		// A full window empties as messages are released; a retry later
		// can succeed, which is what 429 and its Retry-After say.
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// refused answers a Result that is not a success, or returns 0.
func refused(w http.ResponseWriter, res *Result) int {
	st := status(res.Outcome)
	if st == 0 {
		return 0
	}
	return api.Error(w, st, res.Msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) int {
	e := encoders.Get().(*encoder)
	defer e.done()
	b, err := e.marshal(v)
	if err != nil {
		return api.Error(w, http.StatusInternalServerError, err.Error())
	}
	api.Write(w, status, true, append(b, '\n'))
	return status
}

// encoder renders JSON as json.Marshal does but without escaping HTML:
// a payload comes back as the JSON its publisher sent (compacted), where
// json.Marshal turned each <, > and & into six bytes, so a legal 1 MiB
// payload of '<' rendered as a 6 MiB page, past what the stream budget
// reserved for it (pageCost), and unlike what was published.
type encoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := new(encoder)
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// marshal renders v; the bytes are e's until its next use.
func (e *encoder) marshal(v any) ([]byte, error) {
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")), nil
}

// marshal is json.Marshal without escaping HTML (encoder), in bytes of
// the caller's.
func marshal(v any) ([]byte, error) {
	e := encoders.Get().(*encoder)
	defer e.done()
	b, err := e.marshal(v)
	return bytes.Clone(b), err
}

// appendJSON appends v rendered as marshal renders it to dst.
func appendJSON(dst []byte, v any) []byte {
	e := encoders.Get().(*encoder)
	defer e.done()
	b, _ := e.marshal(v)
	return append(dst, b...)
}

// done puts e back for another use, unless a large answer grew it: the
// pool would keep that memory for everyone's small ones.
func (e *encoder) done() {
	if e.buf.Cap() <= 64<<10 {
		encoders.Put(e)
	}
}

// checkName is the rule for a group, processor or consumer name, on
// every route and call (api.CheckName): what the machine would refuse,
// and text that is no name (control or bidi characters, a path), refused
// before anything is logged.
func checkName(what, s string, max int) string {
	if p := api.CheckName(s, max); p != "" {
		return what + " " + p
	}
	return ""
}

// checkMessageID is the rule for a message id a publisher picks: printable
// text, '/' allowed.
func checkMessageID(s string) string {
	if p := api.CheckID(s, 1, MaxIDLen); p != "" {
		return "id " + p
	}
	return ""
}

// checkPayload is the rule for a payload: JSON (the HTTP routes serve it
// inline) with text strings, as an HTTP body's strings must be, and no
// bidi controls.
func checkPayload(b []byte) string {
	if p := api.CheckJSONText(b); p != "" {
		return "payload " + p
	}
	return ""
}

// pathGroup reads {group}, or answers 400.
func pathGroup(w http.ResponseWriter, r *http.Request) (string, int) {
	g := r.PathValue("group")
	if p := checkName("group name", g, MaxNameLen); p != "" {
		return "", api.Error(w, http.StatusBadRequest, p)
	}
	return g, 0
}

// parseWait reads a wait in ms (a body's waitMs) or as ?wait= (a Go
// duration such as 10s, or whole seconds).
func parseWait(s string) (time.Duration, string) {
	if s == "" {
		return 0, ""
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n, err2 := strconv.Atoi(s)
		if err2 != nil || n < 0 || n > int(MaxWait/time.Second) {
			return 0, fmt.Sprintf("wait must be a duration from 0s to %v (such as 10s or 500ms, or whole seconds), got %s", MaxWait, api.Quote(s))
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d > MaxWait {
		return 0, fmt.Sprintf("wait must be between 0s and %v, got %s", MaxWait, api.Quote(s))
	}
	return d, ""
}

func queryUint(w http.ResponseWriter, r *http.Request, name string, def uint64) (uint64, int) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, 0
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return 0, api.Error(w, http.StatusBadRequest, name+" must be a whole number from 0, got "+api.Quote(s))
	}
	return n, 0
}

// newID returns a random version-4 UUID: a publish without an id gets
// one, so a retry inside the engine never makes a second message.
func newID() string { return ids.New().String() }

// stamp renders an input time with full precision: stage latencies are
// often well under a millisecond.
func stamp(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}
