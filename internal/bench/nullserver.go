package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/surge-run/surge/internal/api"
)

// The null server's answers have the size and shape of the real ones, so
// the generator does the same parsing work against both and the difference
// between the two runs is the server's own cost.
var (
	nullReservationID = []byte("00000000-0000-4000-8000-000000000000")
	nullReservation   = []byte(`{"reservationId":"00000000-0000-4000-8000-000000000000",` +
		`"userId":"user123","eventId":"event-00000000-0000-4000-8000-000000000000",` +
		`"areaId":"0","numOfSeats":2,"numOfSeat":0,"type":"RANDOM",` +
		`"seats":[{"row":0,"col":0},{"row":0,"col":1}],"state":"RESERVED","failedReason":""}`)
	nullEvent = []byte(`{"eventName":"event-00000000-0000-4000-8000-000000000000","artist":"go-load-test","areas":[]}`)
)

// NullHandler serves the ticketing routes, the commerce bench's routes
// (commerce_null.go) and the jobs gRPC services (jobs_null.go) and does
// nothing: it reads and
// discards each body and answers with a fixed reply. Run against it, the
// generator measures the machine's HTTP ceiling.
func NullHandler() http.Handler {
	mux := http.NewServeMux()
	reply := func(status int, contentType string, body []byte) http.HandlerFunc {
		// Header values built once: the baseline should not pay for
		// allocations a real server could also avoid.
		ct := []string{contentType}
		return func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header()["Content-Type"] = ct
			w.WriteHeader(status)
			_, _ = w.Write(body)
		}
	}
	mux.Handle("POST /v1/event", reply(http.StatusOK, "application/json", nullEvent))
	mux.Handle("POST /v1/event/{id}/reservation", reply(http.StatusOK, "text/plain", nullReservationID))
	mux.Handle("GET /v1/reservation/{id}", reply(http.StatusOK, "application/json", nullReservation))
	mux.Handle("POST /v2/reservations", reply(http.StatusCreated, "application/json", nullReservation))
	mux.Handle("GET /v1/health_check", reply(http.StatusOK, "text/plain", []byte("OK")))
	registerCommerceNull(mux, reply)
	registerJobsNull(mux)
	return mux
}

// ServeNull runs the null handler on addr with the listener every Surge
// workload uses, until ctx is done, then shuts down gracefully. It reads
// its connections as net/http alone does (Limits.StandardConns): it is
// the standard Go stack's cost that Surge's is compared with.
func ServeNull(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return serveUntil(ctx, api.NewServer(addr, NullHandler(), api.Limits{StandardConns: true}, nil), ln)
}

func serveUntil(ctx context.Context, srv *api.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
