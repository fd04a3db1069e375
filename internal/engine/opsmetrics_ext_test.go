package engine_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/promtest"
)

// gathered returns the value of name's series whose labels include
// label=value (any series when label is ""), and whether there is one.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) (float64, bool) {
	t.Helper()
	var match func(*dto.Metric) bool
	if label != "" {
		match = promtest.Labeled(label, value)
	}
	return promtest.Value(t, reg, name, match)
}

// The alerts in deploy/prometheus read these: a timer that fires live
// counts once by the kind before its "/", replay counts nothing again,
// and the saga and lease kinds are exported at 0 before any fires.
func TestTimersFiredCountedByKindLiveOnly(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	e := openBoth(t, dir, withMetrics(reg))
	for _, kind := range []string{"saga", "lease"} {
		if v, ok := gathered(t, reg, "surge_engine_timers_fired_total", "kind", kind); !ok || v != 0 {
			t.Fatalf("before any timer: %s = %v (exported %v), want 0 exported", kind, v, ok)
		}
	}
	at := time.Now().Add(10 * time.Millisecond).UnixNano()
	pickyDo(t, e, "s", &pTimerNote{ID: "saga/o-1", Key: "s", AtNs: at})
	pickyDo(t, e, "s", &pTimerNote{ID: "saga/o-2", Key: "s", AtNs: at})
	pickyDo(t, e, "l", &pTimerNote{ID: "lease/j-1", Key: "l", AtNs: at})
	pickyWait(t, e, "s", 2)
	pickyWait(t, e, "l", 1)
	for kind, want := range map[string]float64{"saga": 2, "lease": 1} {
		if v, _ := gathered(t, reg, "surge_engine_timers_fired_total", "kind", kind); v != want {
			t.Errorf("%s timers fired = %v, want %v", kind, v, want)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	reg2 := prometheus.NewRegistry()
	e2 := openBoth(t, dir, withMetrics(reg2))
	defer e2.Close()
	pickyWait(t, e2, "s", 2)
	if v, _ := gathered(t, reg2, "surge_engine_timers_fired_total", "kind", "saga"); v != 0 {
		t.Errorf("after replay: saga timers fired = %v, want 0 (replay fires nothing)", v)
	}
}

func TestLogFailedAndQueueDelayLimitGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := openBoth(t, t.TempDir(), withMetrics(reg))
	defer e.Close()
	if v, ok := gathered(t, reg, "surge_engine_log_failed", "", ""); !ok || v != 0 {
		t.Errorf("surge_engine_log_failed = %v (exported %v), want 0 on a working log", v, ok)
	}
	want := engine.DefaultMaxQueueDelay.Seconds()
	if v, ok := gathered(t, reg, "surge_engine_max_queue_delay_seconds", "", ""); !ok || v != want {
		t.Errorf("surge_engine_max_queue_delay_seconds = %v (exported %v), want the default %v", v, ok, want)
	}
}
