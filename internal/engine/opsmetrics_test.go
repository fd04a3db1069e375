package engine

import "testing"

func TestTimerKindIsBounded(t *testing.T) {
	for id, want := range map[string]string{
		"saga/o-1":                      "saga",
		"lease/j-9":                     "lease",
		"purge":                         "purge",
		"":                              "other",
		"/x":                            "other",
		"a-very-long-timer-id-no-slash": "other",
	} {
		if got := timerKind(id); got != want {
			t.Errorf("timerKind(%q) = %q, want %q", id, got, want)
		}
	}
}
