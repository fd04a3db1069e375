package api_test

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/surge-run/surge/internal/api"
)

// h2FuzzSeedBytes leaves out the corpus's largest sequences (the header
// lists over MaxHeaderBytes), whose mutations would be slow to send.
const h2FuzzSeedBytes = 32 << 10

// FuzzH2Frames sends the preface and then the input, whatever it is, to
// the lean HTTP/2 server (Limits.LeanH2) and closes its side for writing:
// the server must not panic, must close the connection or send GOAWAY
// within h2Hang (the input has ended, so whatever it answers it has
// answered), and
// must still serve a fresh connection afterwards. Seeded with the bytes
// each frame sequence of h2Corpus writes after the preface.
func FuzzH2Frames(f *testing.F) {
	for _, cs := range h2Corpus {
		c, b := h2Recorder(f)
		h2RecordHandshake(c)
		cs.run(c)
		if b.Len() <= h2FuzzSeedBytes {
			f.Add(b.Bytes())
		}
	}
	// Handlers stuck on /stuck would pile up over the inputs and take
	// every in-flight slot: here they end at once.
	stuck := make(chan struct{})
	close(stuck)
	addr := h2ServeStuck(f, true, api.Limits{MaxStreams: h2CorpusStreams}, stuck)
	f.Fuzz(func(t *testing.T, b []byte) {
		h2FuzzOne(t, addr, b)
		if code, body, err := h2Get(addr, "/"); err != nil || code != http.StatusOK || body != "ok\n" {
			t.Fatalf("after the input, a fresh connection got %d %q, %v", code, body, err)
		}
	})
}

// h2RecordHandshake writes what h2Dial writes after the preface.
func h2RecordHandshake(c *h2Client) {
	c.check(c.fr.WriteSettings())
	c.check(c.fr.WriteSettingsAck())
}

// h2FuzzOne sends the preface and b on a fresh connection, half-closes
// it, and reads until the server closes or sends GOAWAY (after which
// net/http waits a second to close: the answer is complete).
func h2FuzzOne(t *testing.T, addr string, b []byte) {
	conn, err := net.DialTimeout("tcp", addr, h2Hang)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(h2Hang))
	wrote := make(chan error, 1)
	go func() {
		_, err := conn.Write(append([]byte(h2Preface), b...))
		if err == nil {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		wrote <- err
	}()
	// A server that stops reading at a connection error may leave the
	// write unfinished: only what it answers matters.
	defer func() { conn.Close(); <-wrote }()
	fr := http2.NewFramer(nil, conn)
	for {
		f, err := fr.ReadFrame()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("the server neither closed nor sent GOAWAY within %v of the input's end", h2Hang)
		case err != nil:
			return
		case f.Header().Type == http2.FrameGoAway:
			return
		}
	}
}
