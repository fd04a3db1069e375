package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// scrapeTimeout bounds one read of a server's /metrics: the bench reads it
// around its measured windows and must not hang on a stuck server.
const scrapeTimeout = 5 * time.Second

// metrics is one read of a server's Prometheus endpoint, by family name.
type metrics map[string]*dto.MetricFamily

// scrape reads base's /metrics.
func scrape(ctx context.Context, base string) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := oneOffClient(ctx, 0).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: status %d", resp.StatusCode)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (metrics, error) {
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	return metrics(fams), nil
}

// hasLabels says whether m carries every name=value pair of want
// (alternating names and values).
func hasLabels(m *dto.Metric, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == want[i] && l.GetValue() == want[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// sample is a counter's, gauge's or untyped series' value; a histogram's
// or summary's series have none of their own.
func sample(m *dto.Metric) (float64, bool) {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// value sums the series of name whose labels include want (name, value,
// name, value...). name is as the text exposition spells it: a
// histogram's or summary's name_sum and name_count are read from its
// family. It is false when no series matched.
func (ms metrics) value(name string, want ...string) (float64, bool) {
	if f, ok := ms[name]; ok {
		total, found := 0.0, false
		for _, m := range f.GetMetric() {
			if v, ok := sample(m); ok && hasLabels(m, want) {
				total, found = total+v, true
			}
		}
		return total, found
	}
	for _, suffix := range []string{"_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if f, known := ms[base]; ok && known {
			return sumOrCount(f, suffix == "_sum", want)
		}
	}
	return 0, false
}

func sumOrCount(f *dto.MetricFamily, sum bool, want []string) (float64, bool) {
	total, found := 0.0, false
	for _, m := range f.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Histogram != nil && sum:
			total += m.Histogram.GetSampleSum()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		case m.Summary != nil && sum:
			total += m.Summary.GetSampleSum()
		case m.Summary != nil:
			total += float64(m.Summary.GetSampleCount())
		default:
			continue
		}
		found = true
	}
	return total, found
}

// count is how many series name has.
func (ms metrics) count(name string) int { return len(ms[name].GetMetric()) }

// byLabel maps each value of label among name's series to its value.
func (ms metrics) byLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms[name].GetMetric() {
		v, ok := sample(m)
		if !ok {
			continue
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += v
			}
		}
	}
	return out
}

// series maps each series of the given families to its value, keyed by
// the series as the text exposition writes it: name{label="value",...}.
func (ms metrics) series(families []string) map[string]float64 {
	out := map[string]float64{}
	for _, name := range families {
		for _, m := range ms[name].GetMetric() {
			if v, ok := sample(m); ok {
				out[seriesName(name, m)] = v
			}
		}
	}
	return out
}

func seriesName(name string, m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return name
	}
	parts := make([]string, len(m.GetLabel()))
	for i, l := range m.GetLabel() {
		parts[i] = fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// buckets is a histogram's cumulative counts by upper bound, summed over
// the series whose labels include want; +Inf holds the total. nil if the
// server has no such histogram.
func (ms metrics) buckets(name string, want ...string) map[float64]float64 {
	var out map[float64]float64
	for _, m := range ms[name].GetMetric() {
		h := m.GetHistogram()
		if h == nil || !hasLabels(m, want) {
			continue
		}
		if out == nil {
			out = map[float64]float64{}
		}
		for _, b := range h.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				out[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		out[math.Inf(1)] += float64(h.GetSampleCount())
	}
	return out
}

// metricsCPUSeconds reads process_cpu_seconds_total from a server's
// Prometheus endpoint: the only CPU figure available for a server the bench
// did not start.
func metricsCPUSeconds(ctx context.Context, baseURL string) (float64, error) {
	m, err := scrape(ctx, baseURL)
	if err != nil {
		return 0, err
	}
	return m.cpuSeconds()
}

func (ms metrics) cpuSeconds() (float64, error) {
	if v, ok := ms.value("process_cpu_seconds_total"); ok {
		return v, nil
	}
	return 0, errors.New("/metrics has no process_cpu_seconds_total")
}
