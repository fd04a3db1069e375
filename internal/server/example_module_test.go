package server

// A new workload is one folder plus one line: everything below would be the
// workload's own package (its machine and its Module), and the server
// learns of it from the one line in TestExampleModuleIsOneLine that adds
// counterModule to the list of modules served (in `surge serve`, the line
// in Builtin). Nothing in the server, the engine or cmd/surge changes.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/module"
)

// counterWorkloadID is written into every log record of the counters; no
// other workload uses it.
const counterWorkloadID uint8 = 200

// counterAdd adds N to the counter Key unless that passes Max. The limit
// travels in the command, so replay decides as the live run did whatever
// --counter-max is then.
type counterAdd struct {
	Key    string
	N, Max int64
}

func (c *counterAdd) AppendBinary(b []byte) ([]byte, error) {
	b = binary.AppendVarint(b, c.N)
	b = binary.AppendVarint(b, c.Max)
	return append(b, c.Key...), nil
}

// errCounterFull is the reply to an add past the counter's limit.
var errCounterFull = errors.New("counter full")

// counterGet asks for the value of a counter.
type counterGet struct{ Key string }

// counterMachine holds the counters of one partition.
type counterMachine struct{ counts map[string]int64 }

// Apply adds, refusing an add past the command's limit, and notes each
// change for the module.
func (m *counterMachine) Apply(in *engine.Input, fx *engine.Effects) {
	c := in.Cmd.(*counterAdd)
	if m.counts[c.Key]+c.N > c.Max {
		fx.Reply(errCounterFull)
		return
	}
	m.counts[c.Key] += c.N
	fx.Reply(m.counts[c.Key])
	fx.Notify(c.Key)
}

func (m *counterMachine) Query(q any) any { return m.counts[q.(counterGet).Key] }

func (m *counterMachine) Decode(b []byte) (engine.Command, error) {
	n, s1 := binary.Varint(b)
	if s1 <= 0 {
		return nil, errors.New("counter: bad varint")
	}
	limit, s2 := binary.Varint(b[s1:])
	if s2 <= 0 {
		return nil, errors.New("counter: bad varint")
	}
	return &counterAdd{N: n, Max: limit, Key: string(b[s1+s2:])}, nil
}

func (m *counterMachine) AppendSnapshot(dst []byte) []byte {
	keys := make([]string, 0, len(m.counts))
	for k := range m.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
		dst = binary.AppendVarint(dst, m.counts[k])
	}
	return dst
}

func (m *counterMachine) Restore(b []byte) error {
	m.counts = map[string]int64{}
	for len(b) > 0 {
		l, s := binary.Uvarint(b)
		if s <= 0 || uint64(len(b)-s) < l {
			return errors.New("counter: bad snapshot")
		}
		k := string(b[s : s+int(l)])
		b = b[s+int(l):]
		n, s := binary.Varint(b)
		if s <= 0 {
			return errors.New("counter: bad snapshot")
		}
		m.counts[k], b = n, b[s:]
	}
	return nil
}

type counterWorkload struct{}

func (counterWorkload) ID() uint8    { return counterWorkloadID }
func (counterWorkload) Name() string { return "counter" }
func (counterWorkload) NewMachine(int) engine.Machine {
	return &counterMachine{counts: map[string]int64{}}
}

// counterModule is all the server needs of the counters: a flag, the
// engine workload, where its notes go and its routes (it has no gRPC
// service, no long-lived call and nothing to end at shutdown).
var counterModule = module.Module{
	Name: "counter",
	Flags: []module.Flag{module.Int("counter-max", "SURGE_COUNTER_MAX", 1000,
		"largest value a counter may reach; an add past it is refused with 409").NotNegative("must be positive")},
	Open: func(env module.Env) (module.Parts, error) {
		var noted atomic.Int64
		return module.Parts{
			Workload: counterWorkload{},
			Notes:    func(int, any) { noted.Add(1) },
			Serve: func(h module.Host) (module.Served, error) {
				max := env.Settings.Int("counter-max")
				h.Metrics.Handle(h.Mux, "POST /v1/counters/{key}", func(w http.ResponseWriter, r *http.Request) int {
					key := r.PathValue("key")
					v, err := h.Engine.Do(r.Context(), h.Engine.PartitionOf(key), counterWorkloadID, &counterAdd{Key: key, N: 1, Max: int64(max)})
					switch {
					case err != nil:
						return api.Error(w, http.StatusServiceUnavailable, err.Error())
					case v == errCounterFull:
						return api.Error(w, http.StatusConflict, fmt.Sprintf("counter %s is at --counter-max (%d)", key, max))
					}
					api.Write(w, http.StatusOK, true, fmt.Appendf(nil, `{"value":%d}`+"\n", v))
					return http.StatusOK
				})
				h.Metrics.Handle(h.Mux, "GET /v1/counters/{key}", func(w http.ResponseWriter, r *http.Request) int {
					key := r.PathValue("key")
					v, err := h.Engine.Query(r.Context(), h.Engine.PartitionOf(key), counterWorkloadID, counterGet{key})
					if err != nil {
						return api.Error(w, http.StatusServiceUnavailable, err.Error())
					}
					api.Write(w, http.StatusOK, true, fmt.Appendf(nil, `{"value":%d}`+"\n", v))
					return http.StatusOK
				})
				h.Metrics.Handle(h.Mux, "GET /v1/counters-noted", func(w http.ResponseWriter, r *http.Request) int {
					api.Write(w, http.StatusOK, true, fmt.Appendf(nil, `{"noted":%d}`+"\n", noted.Load()))
					return http.StatusOK
				})
				return module.Served{Log: []any{"counter_max", max}}, nil
			},
		}, nil
	},
}

// TestExampleModuleIsOneLine: a workload added with one line is served
// over HTTP beside the built-in ones, gets its setting, its notes and its
// state back after a restart.
func TestExampleModuleIsOneLine(t *testing.T) {
	dir := t.TempDir()
	run := func() (string, func()) {
		ctx, stop := context.WithCancel(context.Background())
		ready, errc := make(chan string, 1), make(chan error, 1)
		cfg := dataDirConfig(dir, 2, ready)
		cfg.Modules = append(Builtin(), counterModule) // the one line
		cfg.Settings = module.Settings{"counter-max": 3}
		go func() { errc <- Run(ctx, cfg) }()
		select {
		case addr := <-ready:
			return "http://" + addr, func() {
				stop()
				if err := <-errc; err != nil {
					t.Error(err)
				}
			}
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("the server did not become ready")
		}
		return "", nil
	}
	do := func(method, url string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	base, stop := run()
	for i := 1; i <= 3; i++ {
		if st, body := do("POST", base+"/v1/counters/a"); st != 200 || body != `{"value":`+strconv.Itoa(i)+`}` {
			t.Fatalf("add %d: %d %s", i, st, body)
		}
	}
	if st, body := do("POST", base+"/v1/counters/a"); st != http.StatusConflict || !strings.Contains(body, "--counter-max (3)") {
		t.Fatalf("add past --counter-max: %d %s", st, body)
	}
	if st, body := do("GET", base+"/v1/counters-noted"); st != 200 || body != `{"noted":3}` {
		t.Fatalf("notes routed to the module: %d %s", st, body)
	}
	if st, _ := do("GET", base+"/v2/events/none"); st != http.StatusNotFound {
		t.Fatalf("a built-in workload's route beside it: %d", st)
	}
	stop()
	base, stop = run()
	defer stop()
	if st, body := do("POST", base+"/v1/counters/b"); st != 200 || body != `{"value":1}` {
		t.Fatalf("after a restart, another counter: %d %s", st, body)
	}
	if st, body := do("GET", base+"/v1/counters/a"); st != 200 || body != `{"value":3}` {
		t.Fatalf("after a restart, counter a: %d %s, want 3", st, body)
	}
}
