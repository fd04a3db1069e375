package module

import (
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	a := Module{Name: "a", Flags: []Flag{
		Duration("wait", "SURGE_WAIT", time.Second, "how long").NotNegative("must be a positive duration such as 1s"),
		Int("count", "SURGE_COUNT", 3, "how many"),
	}}
	for _, c := range []struct {
		mods []Module
		s    Settings
		want string // "" for no error
	}{
		{[]Module{a}, nil, ""},
		{[]Module{a}, Settings{"wait": 2 * time.Second, "count": -4}, ""},
		{[]Module{a}, Settings{"wait": -time.Second}, "--wait -1s: must be a positive duration such as 1s"},
		{[]Module{a}, Settings{"wait": 2}, `setting "wait": int 2 is not a duration`},
		{[]Module{a}, Settings{"count": int64(2)}, `setting "count": int64 2 is not an int`},
		{[]Module{a}, Settings{"cuont": 2}, `setting "cuont": no module has such a flag (known: count, wait)`},
		{[]Module{a, {Name: "b", Flags: []Flag{Int("count", "SURGE_B_COUNT", 1, "")}}}, nil, "module b: flag --count is declared twice"},
		{[]Module{{Name: "c", Flags: []Flag{{Name: "ratio", Default: 0.5}}}}, nil, "module c: flag --ratio: a default of type float64"},
	} {
		err := Check(c.mods, c.s)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.s, err, c.want)
		}
	}
	s := Settings{"wait": 2 * time.Second}
	if s.Duration("wait") != 2*time.Second || s.Duration("other") != 0 || s.Int("count") != 0 {
		t.Errorf("Settings read %v %v %v", s.Duration("wait"), s.Duration("other"), s.Int("count"))
	}
}
