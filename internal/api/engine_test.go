package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
)

// A command too large for the log is the client's to fix: 413 over HTTP,
// RESOURCE_EXHAUSTED over gRPC, both naming the limit.
func TestTooLargeForTheLogIsTheClients(t *testing.T) {
	err := fmt.Errorf("%w: the command would need a log entry of 17000011 bytes", engine.ErrTooLarge)
	limit := fmt.Sprint(cmdlog.MaxEntryBytes)

	w := httptest.NewRecorder()
	if st := EngineError(w, err, "busy"); st != http.StatusRequestEntityTooLarge || w.Code != st {
		t.Fatalf("HTTP status %d (recorded %d), want 413", st, w.Code)
	}
	var body struct{ Error string }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || !strings.Contains(body.Error, limit) {
		t.Fatalf("HTTP body %q (%v) does not name the limit %s", w.Body, err, limit)
	}

	var ce *connect.Error
	if !errors.As(GRPCEngineError(err), &ce) || ce.Code() != connect.CodeResourceExhausted || !strings.Contains(ce.Message(), limit) {
		t.Fatalf("gRPC: %v, want RESOURCE_EXHAUSTED naming %s", GRPCEngineError(err), limit)
	}
}
