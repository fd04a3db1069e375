package bench

import (
	"net"
	"testing"
	"time"
	"context"
)

func TestDbg(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() {
		c, _ := ln.Accept()
		c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 4096)
		n, _ := c.Read(b)
		t.Logf("%q", b[:n])
		c.Close()
	}()
	g, err := NewGenerator(GenConfig{BaseURL: "http://" + ln.Addr().String(), Flow: FlowNative, Areas: 1, Reservations: 1, Clients: 1, Groups: 1, Inflight: 1})
	if err != nil { t.Fatal(err) }
	w := g.workers[0]
	w.run(context.Background())
	t.Log(g.errorSamples)
}
