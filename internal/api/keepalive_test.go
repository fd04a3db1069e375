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
	reg := prometheus.NewRegistry()
	_, addr := startServer(t, postHandler(), Limits{IdleTimeout: raceTimeout, ReadHeaderTimeout: raceTimeout}, reg)
	requireNoResetAtTimeout(t, addr)
	for _, name := range []string{"surge_http_connections_shed_total", "surge_http_connections_refused_total"} {
		if v := metric(t, reg, name); v != 0 {
			t.Errorf("%s = %v, want 0: no connection was over the cap", name, v)
		}
	}
}

// tcpPair returns the two ends of a loopback TCP connection, the server's
// accepted one first.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.DialTimeout("tcp", ln.Addr().String(), hang)
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return server, client
}

// sendUnread writes a request from client and waits until it sits unread
// on server.
func sendUnread(t *testing.T, server, client net.Conn) {
	t.Helper()
	if _, err := io.WriteString(client, "GET / HTTP/1.1\r\nHost: surge\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(hang)
	for !hasUnread(server) {
		if time.Now().After(deadline) {
			t.Fatal("the request never arrived")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRequestWaitingAtTheDeadlineIsRead: when the wait for a kept-alive
// connection's next request runs out with the request already arrived,
// the server reads it instead of closing on it.
func TestRequestWaitingAtTheDeadlineIsRead(t *testing.T) {
	server, client := tcpPair(t)
	c := newConnTracker(1, DefaultIdleTimeout, DefaultReadHeaderTimeout).admit(server)
	c.t.setState(c, http.StateActive)
	c.fresh.Store(false) // it has served a request
	c.t.setState(c, http.StateIdle)
	sendUnread(t, server, client)
	c.SetReadDeadline(time.Now().Add(-time.Second))
	buf := make([]byte, 64)
	if n, err := c.Read(buf); n == 0 {
		t.Fatalf("read %d bytes, %v; want the request", n, err)
	}
}

// TestCloseWithRequestUnreadIsNotAReset: a connection closed with the
// client's request unread sends its FIN first, so the client reads a clean
// close rather than "connection reset by peer"; the slot is freed after.
func TestCloseWithRequestUnreadIsNotAReset(t *testing.T) {
	server, client := tcpPair(t)
	tr := newConnTracker(1, DefaultIdleTimeout, DefaultReadHeaderTimeout)
	c := tr.admit(server)
	sendUnread(t, server, client)
	c.Close()
	client.SetReadDeadline(time.Now().Add(hang))
	if n, err := client.Read(make([]byte, 64)); err != io.EOF {
		t.Fatalf("client read %d bytes, %v; want EOF (a FIN)", n, err)
	}
	deadline := time.Now().Add(hang)
	for tr.openConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still counted open after the close", tr.openConns())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConnWithRequestArrivingIsNotShed: at the cap, a kept-alive
// connection whose next request has arrived (not read yet) is busy, not
// idle: a newcomer does not shed it.
func TestConnWithRequestArrivingIsNotShed(t *testing.T) {
	server, client := tcpPair(t)
	tr := newConnTracker(1, DefaultIdleTimeout, DefaultReadHeaderTimeout)
	c := tr.admit(server)
	tr.setState(c, http.StateActive)
	tr.setState(c, http.StateIdle)
	sendUnread(t, server, client)
	other, _ := tcpPair(t)
	if tr.admit(other) != nil {
		t.Fatal("the newcomer took the place of a connection whose request had arrived")
	}
	if tr.shed.Load() != 0 {
		t.Fatalf("shed %d connections, want 0", tr.shed.Load())
	}
}

// TestNewConnWaitsLikeAKeptAliveOne: a client's pool keeps connections it
// dialed and did not need; such a connection may stay silent for the idle
// timeout, like a kept-alive one, and the header timeout runs from its
// first byte.
func TestNewConnWaitsLikeAKeptAliveOne(t *testing.T) {
	const header = 100 * time.Millisecond
	_, addr := startServer(t, okHandler(), Limits{IdleTimeout: time.Minute, ReadHeaderTimeout: header}, nil)
	c := dial(t, addr)
	time.Sleep(4 * header)
	if r, _, err := c.get("/"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("a request after %v of silence: %v, %v; want 200", 4*header, r, err)
	}
	slow := dial(t, addr)
	time.Sleep(4 * header)
	if _, err := io.WriteString(slow, "GET / HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	if !slow.closedByServer() {
		t.Fatal("headers started and never finished: the connection is still open")
	}
}

// Clients and timing of the timeout race: clients send their request at
// waits spread by raceSpread around raceTimeout, half on kept-alive
// connections, half on new ones.
const (
	raceClients = 300
	raceTimeout = 300 * time.Millisecond
	raceSpread  = 12 * time.Millisecond // waits from raceTimeout-raceSpread/2 on
)

// requireNoResetAtTimeout runs the timeout race against addr, whose
// idle and header timeouts are raceTimeout, and fails t if any request
// was reset or failed otherwise.
func requireNoResetAtTimeout(t *testing.T, addr string) {
	t.Helper()
	var (
		mu       sync.Mutex
		outcomes [raceOther + 1]int
		samples  []string
		wg       sync.WaitGroup
	)
	for i := range raceClients {
		wg.Go(func() {
			wait := raceTimeout - raceSpread/2 + time.Duration(i/2)*raceSpread/(raceClients/2)
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
}
