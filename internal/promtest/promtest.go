// Package promtest finds series in a Prometheus registry, for tests: the
// gather-and-look-up that the packages' metric tests share.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Series is the first series of name in g that match accepts (nil: any),
// or nil if there is none.
func Series(t testing.TB, g prometheus.Gatherer, name string, match func(*dto.Metric) bool) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if match == nil || match(m) {
				return m
			}
		}
	}
	return nil
}

// Value is the value of Series(t, g, name, match) if that is a counter
// or a gauge; false if there is no such series.
func Value(t testing.TB, g prometheus.Gatherer, name string, match func(*dto.Metric) bool) (float64, bool) {
	t.Helper()
	m := Series(t, g, name, match)
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// Labeled accepts a series whose labels include each name and value
// given in pairs: Labeled("kind", "saga").
func Labeled(pairs ...string) func(*dto.Metric) bool {
	return func(m *dto.Metric) bool {
		for i := 0; i+1 < len(pairs); i += 2 {
			if !hasLabel(m, pairs[i], pairs[i+1]) {
				return false
			}
		}
		return true
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
