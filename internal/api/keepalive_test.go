package api

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// postHandler reads the body and answers, like a reservation.
func postHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok\n")
	})
}

// raceOutcome is how one request sent as the server's timeout ran out
// ended.
type raceOutcome int

const (
	raceAnswered raceOutcome = iota // the server read and answered it
	raceClosed                      // a clean close (FIN) before any answer
	raceReset                       // connection reset: the request was lost unseen
	raceOther
)

// postAtTimeout is one keep-alive client: it connects, sends a first
// request if kept (so the connection is idle between requests rather than
// new), stays silent for wait, then POSTs and reads the answer.
func postAtTimeout(addr string, kept bool, wait time.Duration) (raceOutcome, error) {
	c, err := net.DialTimeout("tcp", addr, hang)
	if err != nil {
		return raceOther, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(hang + wait))
	br := bufio.NewReader(c)
	if kept {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: surge\r\n\r\n"); err != nil {
			return raceOther, err
		}
		if err := readAnswer(br); err != nil {
			return raceOther, fmt.Errorf("first request: %w", err)
		}
	}
	time.Sleep(wait)
	body := `{"areaId":"0","numOfSeats":2}`
	_, err = fmt.Fprintf(c, "POST /reserve HTTP/1.1\r\nHost: surge\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if err == nil {
		err = readAnswer(br)
	}
	switch {
	case err == nil:
		return raceAnswered, nil
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return raceReset, err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return raceClosed, err
	}
	return raceOther, err
}

func readAnswer(br *bufio.Reader) error {
	r, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return err
	}
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", r.StatusCode)
	}
	return nil
}

// TestRequestsAtTheTimeoutAreNeverReset is issue 19's "connection reset by
// peer" over HTTP/1.1 with no connection shed or refused: many keep-alive
// clients send a POST just as the server's timeout for their connection
// runs out, either the idle timeout of a kept-alive connection or the wait
// for the first request of a new one (a client pool parks connections it
// dialed and did not need). A request the server has received must be
// answered; one that crosses the close may see the close, never a reset,
// which loses the request unseen.
func TestRequestsAtTheTimeoutAreNeverReset(t *testing.T) {
	const (
		clients = 300
		timeout = 300 * time.Millisecond
		spread  = 12 * time.Millisecond // waits from timeout-spread/2 on
	)
	reg := prometheus.NewRegistry()
	_, addr := startServer(t, postHandler(), Limits{IdleTimeout: timeout, ReadHeaderTimeout: timeout}, reg)
	var (
		mu       sync.Mutex
		outcomes [raceOther + 1]int
		samples  []string
		wg       sync.WaitGroup
	)
	for i := range clients {
		wg.Go(func() {
			wait := timeout - spread/2 + time.Duration(i/2)*spread/(clients/2)
			o, err := postAtTimeout(addr, i%2 == 1, wait)
			mu.Lock()
			defer mu.Unlock()
			outcomes[o]++
			if o >= raceReset && len(samples) < 5 {
				samples = append(samples, fmt.Sprintf("kept=%v wait=%v: %v", i%2 == 1, wait, err))
			}
		})
	}
	wg.Wait()
	t.Logf("answered %d, closed cleanly %d, reset %d, other %d",
		outcomes[raceAnswered], outcomes[raceClosed], outcomes[raceReset], outcomes[raceOther])
	if outcomes[raceReset] > 0 || outcomes[raceOther] > 0 {
		t.Errorf("%d requests were reset and %d failed otherwise, e.g. %v", outcomes[raceReset], outcomes[raceOther], samples)
	}
	for _, name := range []string{"surge_http_connections_shed_total", "surge_http_connections_refused_total"} {
		if v := metric(t, reg, name); v != 0 {
			t.Errorf("%s = %v, want 0: no connection was over the cap", name, v)
		}
	}
}
