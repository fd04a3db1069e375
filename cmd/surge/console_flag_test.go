package main

import "testing"

// --ui is on by default, SURGE_UI=false turns it off, and the flag wins
// over the variable.
func TestServeUIFlag(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{want: "true"},
		{env: "false", want: "false"},
		{args: []string{"--ui=false"}, want: "false"},
		{env: "false", args: []string{"--ui=true"}, want: "true"},
	} {
		if c.env != "" {
			t.Setenv("SURGE_UI", c.env)
		}
		cmd := newServeCmd()
		if err := cmd.Flags().Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := cmd.Flags().Lookup("ui").Value.String(); got != c.want {
			t.Errorf("SURGE_UI=%q %v: --ui = %s, want %s", c.env, c.args, got, c.want)
		}
	}
}
