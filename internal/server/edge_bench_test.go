package server

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/surge-run/surge/internal/jqpb"
)

// BenchmarkCompatReservationH1 is the ticketing compat flow as the
// peer's clients send it over HTTP/1.1 (a POST, then a GET of the id it
// answered), through a whole server on loopback, each client on a
// kept-alive connection of its own. Most reservations fail (the area
// is small), as in the peer's spike. allocs/op counts the server's
// allocations and the client's (three per reservation: the POST's body,
// the GET's path and the id in it).
func BenchmarkCompatReservationH1(b *testing.B) {
	base := serveForTest(b, Config{})
	addr := strings.TrimPrefix(base, "http://")
	c := dialH1(b, addr)
	st, _ := c.do(b, "POST", "/v1/event", `{"eventName":"bench","artist":"x","areas":[{"areaId":"A","price":1,"rowCount":10,"colCount":10}]}`)
	if st != 200 {
		b.Fatalf("creating the event: %d", st)
	}
	var user atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := dialH1(b, addr)
		defer c.Close()
		for pb.Next() {
			body := `{"userId":"u` + strconv.FormatInt(user.Add(1), 10) + `","eventId":"bench","areaId":"A","numOfSeats":1,"type":"RANDOM"}`
			st, id := c.do(b, "POST", "/v1/event/bench/reservation", body)
			if st != 200 {
				b.Fatalf("reserving: %d %s", st, id)
			}
			if st, got := c.do(b, "GET", "/v1/reservation/"+string(id), ""); st != 200 {
				b.Fatalf("reading the reservation: %d %s", st, got)
			}
		}
	})
}

type h1Client struct {
	net.Conn
	r   *bufio.Reader
	out []byte
	in  []byte
}

func dialH1(b *testing.B, addr string) *h1Client {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	return &h1Client{Conn: conn, r: bufio.NewReaderSize(conn, 16<<10)}
}

// do sends one request and returns the answer's status and body (valid
// until the next call).
func (c *h1Client) do(b *testing.B, method, path, body string) (int, []byte) {
	c.out = append(c.out[:0], method...)
	c.out = append(append(append(c.out, ' '), path...), " HTTP/1.1\r\nHost: bench\r\nUser-Agent: Go-http-client/1.1\r\n"...)
	if body != "" {
		c.out = append(c.out, "Content-Type: application/json\r\nContent-Length: "...)
		c.out = strconv.AppendInt(c.out, int64(len(body)), 10)
		c.out = append(c.out, "\r\n"...)
	}
	c.out = append(append(c.out, "Accept-Encoding: gzip\r\n\r\n"...), body...)
	if _, err := c.Write(c.out); err != nil {
		b.Fatal(err)
	}
	status, clen := 0, -1
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case status == 0:
			if len(line) < 12 {
				b.Fatalf("status line %q", line)
			}
			status, _ = strconv.Atoi(string(line[9:12]))
		case len(line) == 0:
			if clen < 0 {
				b.Fatalf("an answer without Content-Length")
			}
			if cap(c.in) < clen {
				c.in = make([]byte, clen)
			}
			c.in = c.in[:clen]
			if _, err := io.ReadFull(c.r, c.in); err != nil {
				b.Fatal(err)
			}
			return status, bytes.TrimSpace(c.in)
		case len(line) > len("content-length:") && bytes.EqualFold(line[:len("content-length:")], []byte("content-length:")):
			clen, _ = strconv.Atoi(string(bytes.TrimSpace(line[len("content-length:"):])))
		}
	}
}

// BenchmarkGRPCGoSubmitJob is the peer's ghz run in small: callers on
// one grpc-go connection to --grpc-addr submitting small jobs, through
// a whole server on loopback. allocs/op counts the client's allocations
// as well as the server's. Run it with a -benchtime of at most 100000x:
// the jobs stay pending, and a queue holds 100,000.
func BenchmarkGRPCGoSubmitJob(b *testing.B) {
	s, _ := serveBoth(b, Config{})
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := jqpb.NewJobServiceClient(conn)
	req := &jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{"command":["true"]}`)}
	b.SetParallelism(100) // 200 callers on the 2-core machine, as the peer's ghz run
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.SubmitJob(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
