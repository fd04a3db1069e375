package ticketing

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// TestOverloadIs429WithRetryAfter: every way the engine sheds a request
// (refused at once, or expired in the queue, which wraps ErrOverloaded)
// reaches the client as 429 with Retry-After and a JSON message.
func TestOverloadIs429WithRetryAfter(t *testing.T) {
	for _, err := range []error{engine.ErrOverloaded, fmt.Errorf("%w: waited too long", engine.ErrOverloaded)} {
		w := httptest.NewRecorder()
		if st := engineError(w, err); st != http.StatusTooManyRequests || w.Code != http.StatusTooManyRequests {
			t.Fatalf("%v: status %d (returned %d), want 429", err, w.Code, st)
		}
		if w.Header().Get("Retry-After") == "" {
			t.Fatalf("%v: no Retry-After", err)
		}
		var body struct{ Error string }
		if json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Error == "" {
			t.Fatalf("%v: body %q is not a JSON error", err, w.Body.String())
		}
	}
}
