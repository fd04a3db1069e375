package api

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// trackedPair is a loopback connection: the client's end, and the
// server's end admitted by a tracker of cap max.
func trackedPair(t *testing.T, tr *connTracker) (client net.Conn, server *trackedConn) {
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
	t.Cleanup(func() { client.Close() })
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	server = tr.admit(nc)
	if server == nil {
		t.Fatal("the tracker refused the connection")
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

func coalescingTracker(max int) *connTracker {
	tr := newConnTracker(max, DefaultIdleTimeout, DefaultReadHeaderTimeout)
	tr.coalesce = true
	return tr
}

// TestSmallReadsShareOneSocketRead: what the client sent at once is read
// from the socket once however small the reads that consume it (an h2
// frame header is 9 bytes), comes out intact, and the buffer is given
// back once consumed.
func TestSmallReadsShareOneSocketRead(t *testing.T) {
	for _, coalesce := range []bool{true, false} {
		tr := coalescingTracker(1)
		tr.coalesce = coalesce
		client, server := trackedPair(t, tr)
		sent := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz"), 30) // 1,080 bytes
		if _, err := client.Write(sent); err != nil {
			t.Fatal(err)
		}
		server.SetReadDeadline(time.Now().Add(hang))
		got := make([]byte, 0, len(sent))
		var small [9]byte
		for len(got) < len(sent) {
			n, err := server.Read(small[:])
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, small[:n]...)
		}
		if !bytes.Equal(got, sent) {
			t.Fatalf("coalesce %v: read %q, sent %q", coalesce, got, sent)
		}
		reads := tr.socketReads.Load()
		switch {
		case coalesce && reads != 1:
			t.Errorf("%d socket reads for %d bytes sent in one write, read 9 at a time; want 1", reads, len(sent))
		case !coalesce && reads != uint64(len(sent)+8)/9:
			t.Errorf("standard reads: %d socket reads, want one per read (%d)", reads, (len(sent)+8)/9)
		}
		if coalesce && (server.rb.buf != nil || server.rb.buffered()) {
			t.Error("the buffer is still held after every byte was read")
		}
	}
}

// TestCoalescedReadKeepsErrors: a coalesced read reports a deadline as a
// timeout and the client's close as io.EOF, as a socket read does (net/http
// tells an idle timeout and a closed connection apart by them), and holds
// no buffer while it waits.
func TestCoalescedReadKeepsErrors(t *testing.T) {
	client, server := trackedPair(t, coalescingTracker(1))
	// A request's read, not the wait for one (which the idle timeout bounds).
	server.waiting.Store(false)
	server.fresh.Store(false)
	server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [9]byte
	_, err := server.Read(b[:])
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	if server.rb.buf != nil {
		t.Error("a read that found nothing holds a buffer")
	}
	server.SetReadDeadline(time.Now().Add(hang))
	client.Write([]byte("last"))
	client.Close()
	got, err := io.ReadAll(io.LimitReader(readerFunc(server.Read), 100))
	if err != nil || string(got) != "last" {
		t.Fatalf("read %q, %v; want \"last\" then io.EOF", got, err)
	}
	if _, err := server.Read(b[:]); err != io.EOF {
		t.Fatalf("read after the client closed: %v, want io.EOF", err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestBufferedRequestIsNotIdle: a kept-alive connection whose next request
// is already in the coalescing buffer (read with the 1-byte read net/http
// waits with) is not shed as idle at the connection cap: the newcomer is
// refused instead, as when the request is still in the socket.
func TestBufferedRequestIsNotIdle(t *testing.T) {
	tr := coalescingTracker(1)
	client, server := trackedPair(t, tr)
	tr.setState(server, http.StateNew)
	tr.setState(server, http.StateIdle)
	client.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	server.SetReadDeadline(time.Now().Add(hang))
	var one [1]byte
	if _, err := server.Read(one[:]); err != nil {
		t.Fatal(err)
	}
	if hasUnread(server.Conn) {
		t.Fatal("the socket still holds bytes: the request was not read into the buffer")
	}
	tr.mu.Lock()
	victim := tr.takeVictimLocked(time.Now())
	tr.mu.Unlock()
	if victim != nil {
		t.Fatal("the connection whose request waits in the buffer was picked to be shed")
	}
}

// TestH2CRequestsReadTogether: h2c requests sent together (HEADERS and
// DATA frames of many streams) are read in far fewer socket reads than
// frames, where the standard stack reads each frame twice. It counts the
// server's own metric, surge_http_socket_reads_total.
func TestH2CRequestsReadTogether(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		const streams = 32
		perRequest := map[bool]float64{}
		for _, standard := range []bool{false, true} {
			reg := prometheus.NewRegistry()
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Write([]byte("ok"))
			})
			_, addr := startServer(t, h, Limits{StandardConns: standard}, reg)
			c := dial(t, addr)
			io.WriteString(c, h2Preface)
			writeFrame(t, c, frameSettings, 0, 0, nil)
			for {
				typ, flags, _, _ := readFrame(t, c)
				if typ == frameSettings && flags&flagAck == 0 {
					break
				}
			}
			writeFrame(t, c, frameSettings, flagAck, 0, nil)
			before := metric(t, reg, "surge_http_socket_reads_total")
			// POST /block in HPACK, then a 64-byte DATA frame ending the stream.
			post := []byte{0x83, 0x86, 0x04, 0x06, '/', 'b', 'l', 'o', 'c', 'k', 0x41, 0x05, 's', 'u', 'r', 'g', 'e'}
			var all bytes.Buffer
			for i := range streams {
				all.Write(frame(frameHeaders, flagEndHeaders, uint32(2*i+1), post))
				all.Write(frame(frameData, flagEndStream, uint32(2*i+1), bytes.Repeat([]byte{'x'}, 64)))
			}
			if _, err := c.Write(all.Bytes()); err != nil {
				t.Fatal(err)
			}
			for answered := 0; answered < streams; {
				if typ, flags, _, _ := readFrame(t, c); typ == frameData && flags&flagEndStream != 0 {
					answered++
				}
			}
			perRequest[standard] = (metric(t, reg, "surge_http_socket_reads_total") - before) / streams
		}
		t.Logf("socket reads per h2c request: %.2f coalesced, %.2f standard", perRequest[false], perRequest[true])
		if perRequest[true] < 4 {
			t.Errorf("standard reads: %.2f socket reads per h2c request, want 4 (two per frame)", perRequest[true])
		}
		if perRequest[false] > 0.5 {
			t.Errorf("coalesced reads: %.2f socket reads per h2c request sent together, want at most 0.5", perRequest[false])
		}
	})
}

const frameData = 0x0

func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	f := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags,
		byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream)}
	return append(f, payload...)
}

// TestH2CRepliesWrittenTogether: replies of handlers that finish together
// (as a log batch's do) on one h2c connection go out in a few socket
// writes, not one or two per reply; the answers are all there. The
// standard stack's figure is logged beside it. One processor stands for a
// server whose processors are all busy, as under load: with one idle, the
// yield returns at once and nothing waits to be coalesced.
func TestH2CRepliesWrittenTogether(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		const streams = 32
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		perReply := map[bool]float64{}
		for _, standard := range []bool{false, true} {
			reg := prometheus.NewRegistry()
			release := make(chan struct{})
			entered := make(chan struct{}, streams)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-release
				Write(w, http.StatusOK, true, []byte(`{"ok":true}`))
			})
			_, addr := startServer(t, h, Limits{StandardConns: standard}, reg)
			c := dial(t, addr)
			io.WriteString(c, h2Preface)
			writeFrame(t, c, frameSettings, 0, 0, nil)
			for {
				typ, flags, _, _ := readFrame(t, c)
				if typ == frameSettings && flags&flagAck == 0 {
					break
				}
			}
			writeFrame(t, c, frameSettings, flagAck, 0, nil)
			get := []byte{0x82, 0x86, 0x04, 0x06, '/', 'b', 'l', 'o', 'c', 'k', 0x41, 0x05, 's', 'u', 'r', 'g', 'e'}
			for i := range streams {
				writeFrame(t, c, frameHeaders, flagEndStream|flagEndHeaders, uint32(2*i+1), get)
			}
			for range streams {
				<-entered
			}
			time.Sleep(50 * time.Millisecond) // the SETTINGS ack's write is done
			before := metric(t, reg, "surge_http_socket_writes_total")
			close(release)
			for answered := 0; answered < streams; {
				if typ, flags, _, _ := readFrame(t, c); typ == frameData && flags&flagEndStream != 0 {
					answered++
				}
			}
			perReply[standard] = (metric(t, reg, "surge_http_socket_writes_total") - before) / streams
		}
		t.Logf("socket writes per h2c reply: %.2f coalesced, %.2f standard", perReply[false], perReply[true])
		if perReply[false] > 0.25 {
			t.Errorf("coalesced writes: %.2f socket writes per reply of %d handlers released together, want at most 0.25", perReply[false], streams)
		}
	})
}

// TestYieldOnlyWithShortRunQueue: a flush yields while few goroutines
// are runnable and not while many are (a crowd's streams arriving), and
// the sampler sees the run queue.
func TestYieldOnlyWithShortRunQueue(t *testing.T) {
	y := newYielder()
	yields := 0
	y.gosched = func() { yields++ }
	y.yield()
	y.runnable.Store(yieldRunnableMax + 1)
	y.yield()
	y.runnable.Store(yieldRunnableMax)
	y.yield()
	if yields != 2 {
		t.Fatalf("%d yields, want 2: one with an empty run queue, none past yieldRunnableMax, one at it", yields)
	}

	// Goroutines kept runnable on one processor show in the sample.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	stop := make(chan struct{})
	defer close(stop)
	const spinners = 64
	for range spinners {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	y.runnable.Store(0)
	go y.sample(stop)
	deadline := time.Now().Add(hang)
	for y.runnable.Load() < spinners/2 {
		if time.Now().After(deadline) {
			t.Fatalf("the sampler saw %d runnable goroutines with %d spinning on one processor", y.runnable.Load(), spinners)
		}
		time.Sleep(runQueueSample)
	}
}
