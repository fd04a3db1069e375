package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The peer's admin routes are the contract (docs/API.md),
// but it names their fields only in prose: per-stage p50/p90/p95/p99,
// average, min and max, and an order check. So the bench reads those
// answers by meaning rather than by one fixed struct: a stage is any JSON
// object that carries a p50 or p99, named by its key (or its "name" field
// inside an array), its unit taken from the key suffix (p99Ms, p99Us,
// p99Ns) or a "unit" field, milliseconds as the peer reported otherwise.
// The raw answers go into --json as well, so nothing the server said is
// lost to this reading.

// SeqStage is one stage's latency as the server reported it, in ms.
type SeqStage struct {
	Name  string  `json:"name"`
	P50Ms float64 `json:"p50Ms"`
	P90Ms float64 `json:"p90Ms"`
	P95Ms float64 `json:"p95Ms"`
	P99Ms float64 `json:"p99Ms"`
	AvgMs float64 `json:"averageMs"`
	MinMs float64 `json:"minMs"`
	MaxMs float64 `json:"maxMs"`
}

// SeqStats is what the bench understood of a /list/stats answer.
type SeqStats struct {
	Stages []SeqStage `json:"stages"`
	// Ordered is nil when the answer had no order check.
	Ordered *bool `json:"isOrdered"`
	// OrderDetail is the object that held isOrdered (where order broke).
	OrderDetail json.RawMessage `json:"orderDetail,omitempty"`
}

// normKey folds a JSON key to lower-case letters and digits, so p99Ms,
// p99_ms and P99-MS are one key.
func normKey(k string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(k) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// statField says which figure a folded key holds and in what unit (its
// multiplier to ms; 0 when the key names no unit).
func statField(k string) (field string, toMs float64) {
	for _, f := range []struct{ prefix, field string }{
		{"p50", "p50"}, {"median", "p50"}, {"p90", "p90"}, {"p95", "p95"}, {"p99", "p99"},
		{"average", "avg"}, {"avg", "avg"}, {"mean", "avg"}, {"min", "min"}, {"max", "max"},
	} {
		rest, ok := strings.CutPrefix(k, f.prefix)
		if !ok {
			continue
		}
		switch rest {
		case "":
			return f.field, 0
		case "ms", "millis", "milliseconds":
			return f.field, 1
		case "us", "micros", "microseconds":
			return f.field, 1e-3
		case "ns", "nanos", "nanoseconds":
			return f.field, 1e-6
		case "s", "sec", "seconds":
			return f.field, 1e3
		}
	}
	return "", 0
}

// unitToMs reads a "unit" value ("ms", "µs", "us", "ns", "s").
func unitToMs(v any) float64 {
	s, _ := v.(string)
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "ms", "millis", "milliseconds":
		return 1
	case "us", "µs", "micros", "microseconds":
		return 1e-3
	case "ns", "nanos", "nanoseconds":
		return 1e-6
	case "s", "sec", "seconds":
		return 1e3
	}
	return 0
}

func unitOf(m map[string]any) float64 {
	for k, v := range m {
		if normKey(k) == "unit" {
			return unitToMs(v)
		}
	}
	return 0
}

// parseSeqStats reads a /list/stats answer.
func parseSeqStats(b []byte) (SeqStats, error) {
	var root any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&root); err != nil {
		return SeqStats{}, fmt.Errorf("stats: %w", err)
	}
	top, ok := root.(map[string]any)
	if !ok {
		return SeqStats{}, errors.New("stats: not a JSON object")
	}
	var st SeqStats
	defUnit := unitOf(top)
	if defUnit == 0 {
		defUnit = 1
	}
	var walk func(name string, v any, unit float64)
	walk = func(name string, v any, unit float64) {
		switch x := v.(type) {
		case map[string]any:
			if u := unitOf(x); u != 0 {
				unit = u
			}
			if s, ok := stageOf(name, x, unit); ok {
				st.Stages = append(st.Stages, s)
				return
			}
			for _, k := range slices.Sorted(mapKeys(x)) {
				if normKey(k) == "isordered" && st.Ordered == nil {
					if o, ok := x[k].(bool); ok {
						st.Ordered = &o
						st.OrderDetail, _ = json.Marshal(x)
					}
					continue
				}
				walk(k, x[k], unit)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", name, i), e, unit)
			}
		}
	}
	walk("", top, defUnit)
	if len(st.OrderDetail) > 0 && len(st.OrderDetail) > 2048 {
		st.OrderDetail = nil // the whole answer, not a small order object
	}
	return st, nil
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// stageOf reads m as a stage if it has a p50 or p99.
func stageOf(name string, m map[string]any, unit float64) (SeqStage, bool) {
	s := SeqStage{Name: name}
	seen := false
	for k, v := range m {
		nk := normKey(k)
		if nk == "name" || nk == "stage" {
			if n, ok := v.(string); ok && n != "" {
				s.Name = n
			}
			continue
		}
		field, toMs := statField(nk)
		if field == "" {
			continue
		}
		num, ok := v.(json.Number)
		if !ok {
			continue
		}
		f, err := num.Float64()
		if err != nil {
			continue
		}
		if toMs == 0 {
			toMs = unit
		}
		f *= toMs
		switch field {
		case "p50":
			s.P50Ms, seen = f, true
		case "p90":
			s.P90Ms = f
		case "p95":
			s.P95Ms = f
		case "p99":
			s.P99Ms, seen = f, true
		case "avg":
			s.AvgMs = f
		case "min":
			s.MinMs = f
		case "max":
			s.MaxMs = f
		}
	}
	return s, seen
}

// parseSeqCount reads /list/sequenced/count: a bare number, as the peer
// answers, or an object with a count.
func parseSeqCount(b []byte) (int64, error) {
	t := bytes.TrimSpace(b)
	if n, err := strconv.ParseInt(string(t), 10, 64); err == nil {
		return n, nil
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(t))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return 0, fmt.Errorf("count: %q is neither a number nor a JSON object", clip(t))
	}
	for _, want := range []string{"count", "sequencedcount", "sequenced"} {
		for k, v := range m {
			if normKey(k) != want {
				continue
			}
			if num, ok := v.(json.Number); ok {
				if n, err := num.Int64(); err == nil {
					return n, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("count: no count in %q", clip(t))
}

// perfsAverage finds the average rate in a /list/perfs answer (msg/s):
// an average named a rate first ("averageRate"), then one of sequencing
// (the output's pace), then any average.
func perfsAverage(b []byte) (float64, bool) {
	var root any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if d.Decode(&root) != nil {
		return 0, false
	}
	m, ok := root.(map[string]any)
	if !ok {
		return 0, false
	}
	keys := slices.Sorted(mapKeys(m))
	for _, want := range []string{"rate", "sequenc", ""} {
		for _, k := range keys {
			nk := normKey(k)
			if !strings.Contains(nk, "average") && !strings.Contains(nk, "avg") || !strings.Contains(nk, want) {
				continue
			}
			if num, ok := m[k].(json.Number); ok {
				if f, err := num.Float64(); err == nil {
					return f, true
				}
			}
		}
	}
	return 0, false
}

// findStage is the stage from a to b (e.g. "created", "sequenced"), named
// "created→sequenced", "createdToSequenced", "created_to_sequenced" or
// "createdSequenced".
func findStage(stages []SeqStage, from, to string) (SeqStage, bool) {
	for _, s := range stages {
		k := normKey(s.Name)
		mid, ok := strings.CutPrefix(k, from)
		if !ok {
			continue
		}
		if mid, ok = strings.CutSuffix(mid, to); ok && (mid == "" || mid == "to") {
			return s, true
		}
	}
	return SeqStage{}, false
}

// worstStages merges groups' stages: per stage and figure the highest any
// group reported (percentiles of different groups cannot be merged
// exactly; the worst group is the honest bound), and the mean of averages.
func worstStages(all [][]SeqStage) []SeqStage {
	var out []SeqStage
	idx := map[string]int{}
	n := map[string]int{}
	for _, stages := range all {
		for _, s := range stages {
			i, ok := idx[s.Name]
			if !ok {
				idx[s.Name] = len(out)
				out = append(out, SeqStage{Name: s.Name, MinMs: s.MinMs})
				i = len(out) - 1
			}
			w := &out[i]
			w.P50Ms, w.P90Ms, w.P95Ms, w.P99Ms = max(w.P50Ms, s.P50Ms), max(w.P90Ms, s.P90Ms), max(w.P95Ms, s.P95Ms), max(w.P99Ms, s.P99Ms)
			w.MinMs, w.MaxMs = min(w.MinMs, s.MinMs), max(w.MaxMs, s.MaxMs)
			w.AvgMs += s.AvgMs
			n[s.Name]++
		}
	}
	for i := range out {
		out[i].AvgMs /= float64(n[out[i].Name])
	}
	return out
}
