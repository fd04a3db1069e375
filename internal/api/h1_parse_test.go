package api

import (
	"net/http"
	"testing"
)

// BenchmarkParseHead parses the heads the compatibility flow sends on one
// connection, a POST and then a GET of the id it returned, as a
// connection does: its header and memo kept from one request to the next.
func BenchmarkParseHead(b *testing.B) {
	heads := [][]byte{
		[]byte("POST /api/reservation HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 74\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n"),
		[]byte("GET /api/reservation/0b1f6a52-5f0c-4e55-9a4e-0d6a8e1b2c3d HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n"),
	}
	var hd h1Head
	hdr := http.Header{}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		clear(hdr)
		if parseHead(heads[i&1], &hd, hdr, leanBufSize) != headLean {
			b.Fatal("not lean")
		}
	}
}
