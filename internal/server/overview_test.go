package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func getJSON(t *testing.T, url, token string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v in %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// The overview counts the commands each partition applied and keeps the
// warnings the server logged; any valid token may read it.
func TestOverview(t *testing.T) {
	at := newAuthTokens(t)
	s, base := serveWithAuth(t, Config{Partitions: 2, Auth: AuthConfig{Tokens: at.table}})
	for i := range 5 {
		body := fmt.Sprintf(`{"eventName":"ov%d","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":2,"colCount":2}]}`, i)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/event", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+at.tokens["ticketing-write"])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("create event: %d", resp.StatusCode)
		}
	}
	s.logger.Warn("a warning for the overview", "partition", 1)
	s.logger.Info("not kept")

	if st := getJSON(t, base+"/v1/admin/overview", "", nil); st != http.StatusUnauthorized {
		t.Errorf("overview without a token: %d, want 401", st)
	}
	var o overview
	if st := getJSON(t, base+"/v1/admin/overview", at.tokens["sequencer-read"], &o); st != http.StatusOK {
		t.Fatalf("overview with a read token: %d", st)
	}
	if !o.Healthy || o.Node.Mode != "embedded" || o.Node.Partitions != 2 || len(o.Partitions) != 2 {
		t.Errorf("overview: %+v", o)
	}
	var applied, batches uint64
	for _, p := range o.Partitions {
		if !p.Served || p.Owner != o.Node.NodeID {
			t.Errorf("partition %d: served %v owner %q, want this node %q", p.Partition, p.Served, p.Owner, o.Node.NodeID)
		}
		applied += p.Applied
		batches += p.Batches
		if p.Batches > 0 && (p.MeanBatch <= 0 || p.RecentBatch <= 0 || p.RecentCommitMs <= 0 || p.Position == 0) {
			t.Errorf("partition %d: %+v", p.Partition, p)
		}
	}
	// Each event is one create command and one per area.
	if applied < 10 || batches == 0 {
		t.Errorf("applied %d in %d batches, want at least 10 commands", applied, batches)
	}
	if o.Memory.InUse == 0 || o.Memory.Heap == 0 || o.Memory.Limit == nil || *o.Memory.Fraction <= 0 || o.GC.Goroutines == 0 {
		t.Errorf("memory %+v gc %+v", o.Memory, o.GC)
	}
	if o.ErrorsTotal != 1 || len(o.Errors) != 1 || o.Errors[0].Msg != "a warning for the overview" ||
		o.Errors[0].Level != "WARN" || o.Errors[0].Attrs["partition"] != "1" {
		t.Errorf("errors: %d %+v", o.ErrorsTotal, o.Errors)
	}
}

// The ring keeps the newest MaxRecentErrors records, each cut to its
// limits, with the attributes and groups a logger was given.
func TestRecentLogBounds(t *testing.T) {
	rl := &recentLog{}
	lg := slog.New(withRecent(slog.DiscardHandler, rl)).With("node", "n1").WithGroup("g")
	for i := range MaxRecentErrors + 5 {
		lg.Error(fmt.Sprintf("e%d", i), "i", i)
	}
	lg.Log(context.Background(), slog.LevelWarn, strings.Repeat("é", maxRecentMsg))
	args := []any{}
	for i := range 2 * maxRecentAttrs {
		args = append(args, fmt.Sprint("k", i), i)
	}
	lg.Error("many", args...)
	got, total := rl.snapshot()
	if total != MaxRecentErrors+7 || len(got) != MaxRecentErrors {
		t.Fatalf("total %d, kept %d", total, len(got))
	}
	if got[0].Msg != "e7" || got[0].Attrs["node"] != "n1" || got[0].Attrs["g.i"] != "7" {
		t.Errorf("oldest kept: %+v", got[0])
	}
	long := got[len(got)-2].Msg
	if len(long) > maxRecentMsg+len("…") || !strings.HasSuffix(long, "…") || !strings.HasPrefix(long, "éé") {
		t.Errorf("long message kept as %d bytes", len(long))
	}
	if n := len(got[len(got)-1].Attrs); n != maxRecentAttrs {
		t.Errorf("many attributes: kept %d, want %d", n, maxRecentAttrs)
	}
}
