package main

import "testing"

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
