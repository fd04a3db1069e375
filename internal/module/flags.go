package module

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Flag is one setting of a workload: a `surge serve` flag, its SURGE_*
// variable, its default and the values it refuses.
type Flag struct {
	// Name is the flag without its dashes, and the setting's key in
	// Settings.
	Name string
	// Env is the environment variable that sets it when the flag is not
	// given.
	Env string
	// Usage is the help text; `surge serve --help` appends the variable.
	Usage string
	// Default is the flag's value when neither the flag nor Env is set.
	// Its type, int or time.Duration, is the setting's.
	Default any
	// negative, if set, is why a negative value is refused.
	negative string
}

// Duration is a flag holding a time.Duration.
func Duration(name, env string, def time.Duration, usage string) Flag {
	return Flag{Name: name, Env: env, Usage: usage, Default: def}
}

// Int is a flag holding an int.
func Int(name, env string, def int, usage string) Flag {
	return Flag{Name: name, Env: env, Usage: usage, Default: def}
}

// NotNegative refuses negative values, saying why (e.g. "must be a
// positive duration such as 30s"); the server checks before it opens its
// log, so a bad value is reported at once.
func (f Flag) NotNegative(why string) Flag {
	f.negative = why
	return f
}

// check refuses a value of the wrong type or outside the flag's limits.
func (f Flag) check(v any) error {
	var negative bool
	switch d := f.Default.(type) {
	case time.Duration:
		x, ok := v.(time.Duration)
		if !ok {
			return fmt.Errorf("setting %q: %T %v is not a duration", f.Name, v, v)
		}
		negative = x < 0
	case int:
		x, ok := v.(int)
		if !ok {
			return fmt.Errorf("setting %q: %T %v is not an int", f.Name, v, v)
		}
		negative = x < 0
	default:
		return fmt.Errorf("flag --%s: a default of type %T; flags hold an int or a time.Duration", f.Name, d)
	}
	if negative && f.negative != "" {
		return fmt.Errorf("--%s %v: %s", f.Name, v, f.negative)
	}
	return nil
}

// Settings are the values of the modules' flags, by flag name.
type Settings map[string]any

// Duration is the value of a time.Duration flag; 0 if it is not set.
func (s Settings) Duration(name string) time.Duration {
	d, _ := s[name].(time.Duration)
	return d
}

// Int is the value of an int flag; 0 if it is not set.
func (s Settings) Int(name string) int {
	n, _ := s[name].(int)
	return n
}

// Check refuses settings that no module's flag declares, values of the
// wrong type and values outside their flag's limits, and two modules
// declaring one flag.
func Check(mods []Module, s Settings) error {
	flags := map[string]Flag{}
	for _, m := range mods {
		for _, f := range m.Flags {
			if _, dup := flags[f.Name]; dup {
				return fmt.Errorf("module %s: flag --%s is declared twice", m.Name, f.Name)
			}
			if err := f.check(f.Default); err != nil {
				return fmt.Errorf("module %s: %w", m.Name, err)
			}
			flags[f.Name] = f
		}
	}
	for _, n := range slices.Sorted(maps.Keys(s)) {
		f, ok := flags[n]
		if !ok {
			return fmt.Errorf("setting %q: no module has such a flag (known: %s)", n, strings.Join(slices.Sorted(maps.Keys(flags)), ", "))
		}
		if err := f.check(s[n]); err != nil {
			return err
		}
	}
	return nil
}
