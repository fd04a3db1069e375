package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/server"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"256MiB": 256 << 20, "1GiB": 1 << 30, "300MB": 300e6, "268435456": 268435456, "64 KiB": 64 << 10, "off": -1, "OFF": -1, "0": 0, "12B": 12,
	} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-5MiB", "1.5GiB", "12 parsecs", "99999999999TiB", "256mib"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
}

// Cluster flags come from SURGE_* variables unless given on the command
// line.
func TestServeClusterFlagsFromEnv(t *testing.T) {
	t.Setenv("SURGE_KAFKA", "k1:9092,k2:9092")
	t.Setenv("SURGE_CLUSTER", "blue")
	t.Setenv("SURGE_NODE_ID", "env-node")
	t.Setenv("SURGE_KAFKA_SESSION_TIMEOUT", "3s")
	cmd := newServeCmd()
	if err := cmd.Flags().Parse([]string{"--node-id", "flag-node", "--kafka-replication", "3"}); err != nil {
		t.Fatal(err)
	}
	f := cmd.Flags()
	for name, want := range map[string]string{
		"kafka": "k1:9092,k2:9092", "cluster": "blue", "node-id": "flag-node", "advertise": "",
		"kafka-replication": "3", "kafka-session-timeout": "3s", "kafka-log-retention": "168h0m0s",
	} {
		if got := f.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
}

// The snapshot triggers: defaults, SURGE_* variables, and 0 or off on the
// command line turning a trigger off (in server.Config, 0 is the default).
func TestServeSnapshotTriggers(t *testing.T) {
	for _, c := range []struct {
		env, args     []string
		bytes         int64
		interval      time.Duration
		wantErrSubstr string
	}{
		{bytes: engine.DefaultSnapshotBytes, interval: engine.DefaultSnapshotInterval},
		{env: []string{"SURGE_SNAPSHOT_BYTES", "4MiB", "SURGE_SNAPSHOT_INTERVAL", "10s"}, bytes: 4 << 20, interval: 10 * time.Second},
		{env: []string{"SURGE_SNAPSHOT_BYTES", "4MiB"}, args: []string{"--snapshot-bytes", "off", "--snapshot-interval", "0"}, bytes: -1, interval: -1},
		{args: []string{"--snapshot-bytes", "0"}, bytes: -1, interval: engine.DefaultSnapshotInterval},
		{args: []string{"--snapshot-bytes", "lots"}, wantErrSubstr: "--snapshot-bytes"},
		{args: []string{"--snapshot-interval", "-1s"}, wantErrSubstr: "--snapshot-interval"},
	} {
		for i := 0; i < len(c.env); i += 2 {
			t.Setenv(c.env[i], c.env[i+1])
		}
		cmd := newServeCmd()
		if err := cmd.Flags().Parse(c.args); err != nil {
			t.Fatal(err)
		}
		var cfg server.Config
		cfg.SnapshotInterval, _ = cmd.Flags().GetDuration("snapshot-interval")
		err := snapshotTriggers(&cfg, cmd.Flags().Lookup("snapshot-bytes").Value.String())
		switch {
		case c.wantErrSubstr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErrSubstr) {
				t.Errorf("%v %v: error %v, want one naming %s", c.env, c.args, err, c.wantErrSubstr)
			}
		case err != nil:
			t.Errorf("%v %v: %v", c.env, c.args, err)
		case cfg.SnapshotBytes != c.bytes || cfg.SnapshotInterval != c.interval:
			t.Errorf("%v %v: bytes %d interval %v, want %d %v", c.env, c.args, cfg.SnapshotBytes, cfg.SnapshotInterval, c.bytes, c.interval)
		}
		for i := 0; i < len(c.env); i += 2 {
			os.Unsetenv(c.env[i])
		}
	}
}

// A SURGE_* value its flag would refuse stops `surge serve` with a usage
// error naming the variable, as the bad flag would, instead of a warning
// and the default; a flag given on the command line wins over its
// variable, which is then not read. (--snapshot-every -1 makes the start
// fail should a bad variable be let through, rather than serve.)
func TestServeBadEnvStopsStart(t *testing.T) {
	for _, c := range []struct {
		variable, value string
		args            []string
		want            string
	}{
		{"SURGE_MAX_CONNS", "lots", nil, `invalid value "lots" in SURGE_MAX_CONNS, the variable of --max-conns`},
		{"SURGE_IDLE_TIMEOUT", "30", nil, `invalid value "30" in SURGE_IDLE_TIMEOUT`},
		{"SURGE_PPROF", "yes", nil, `invalid value "yes" in SURGE_PPROF`},
		{"SURGE_SAGA_DEADLINE", "soon", nil, `invalid value "soon" in SURGE_SAGA_DEADLINE, the variable of --saga-deadline`},
		{"SURGE_MAX_EVENTS", "1e4", nil, `invalid value "1e4" in SURGE_MAX_EVENTS`},
		{"SURGE_MAX_CONNS", "lots", []string{"--max-conns", "5"}, "--snapshot-every -1"},
	} {
		t.Run(c.variable, func(t *testing.T) {
			t.Setenv(c.variable, c.value)
			root := newRootCmd()
			root.SetArgs(append([]string{"serve", "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--snapshot-every", "-1"}, c.args...))
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s=%q %v: error %v, want one containing %q", c.variable, c.value, c.args, err, c.want)
			}
			if strings.HasPrefix(c.want, "invalid value") && exitStatus(err) != 2 {
				t.Errorf("exit status %d, want 2 as for a bad flag", exitStatus(err))
			}
		})
	}
}

// `surge serve --addr 0.0.0.0:PORT` without TLS and tokens refuses to
// start and says how to go on; --insecure and SURGE_INSECURE let it go on
// (here to a data directory that cannot be made, before it listens).
func TestServeBeyondLoopbackNeedsInsecure(t *testing.T) {
	run := func(env string, args ...string) error {
		if env != "" {
			t.Setenv("SURGE_INSECURE", env)
		}
		root := newRootCmd()
		root.SetArgs(append([]string{"serve", "--data-dir", "/dev/null/surge", "--addr", "0.0.0.0:0"}, args...))
		return root.Execute()
	}
	if err := run(""); err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("open on 0.0.0.0: %v, want a refusal naming --insecure", err)
	}
	for _, c := range []struct{ env, flag string }{{"", "--insecure"}, {"true", ""}} {
		var args []string
		if c.flag != "" {
			args = append(args, c.flag)
		}
		if err := run(c.env, args...); err == nil || !strings.Contains(err.Error(), "/dev/null/surge") {
			t.Errorf("SURGE_INSECURE=%q %s: %v, want the next refusal (the data directory), not the open address", c.env, c.flag, err)
		}
	}
}
