package api

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// FuzzH1Request: the lean parser never panics, and every request it
// takes as lean, net/http's own parser reads the same way (method,
// target, host, header, length): the lean path never serves a request
// net/http would have refused or read differently.
func FuzzH1Request(f *testing.F) {
	for _, s := range h1ParseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var hd h1Head
		hdr := http.Header{}
		st := parseHead(b, &hd, hdr, leanBufSize)
		if st != headLean {
			return
		}
		if hd.size > len(b) || hd.contentLength < 0 && hd.contentLength != -1 {
			t.Fatalf("head size %d of %d bytes, length %d", hd.size, len(b), hd.contentLength)
		}
		checkAgainstNetHTTP(t, b, &hd, hdr)
	})
}

// checkAgainstNetHTTP fails t unless net/http reads b's head as hd and
// hdr say.
func checkAgainstNetHTTP(t *testing.T, b []byte, hd *h1Head, hdr http.Header) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b[:hd.size])))
	if err != nil {
		t.Fatalf("lean took %q, net/http refuses it: %v", b[:hd.size], err)
	}
	want := req.Header.Clone()
	if len(want) == 0 {
		want = http.Header{}
	}
	cl := req.ContentLength
	if hd.contentLength < 0 && cl == 0 {
		cl = -1
	}
	switch {
	case req.Method != hd.method, req.RequestURI != hd.uri || req.URL.String() != hd.url.String(), req.Host != hd.host,
		!req.ProtoAtLeast(1, 1), cl != hd.contentLength, req.Close:
		t.Fatalf("lean read %q as %s %s host %q length %d; net/http as %s %s host %q length %d close %v",
			b[:hd.size], hd.method, hd.target, hd.host, hd.contentLength, req.Method, req.RequestURI, req.Host, req.ContentLength, req.Close)
	case !reflect.DeepEqual(*req.URL, *hd.url):
		t.Fatalf("lean read %q's target as %#v; net/http as %#v", b[:hd.size], *hd.url, *req.URL)
	case !reflect.DeepEqual(want, hdr):
		t.Fatalf("lean read %q's header as %v; net/http as %v", b[:hd.size], hdr, want)
	}
	// The server's own checks beyond ReadRequest's (server.go readRequest).
	if !httpguts.ValidHostHeader(req.Host) {
		t.Fatalf("lean took %q, whose host net/http's server refuses", b[:hd.size])
	}
	for k, vv := range req.Header {
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
				t.Fatalf("lean took %q, whose header %q: %q net/http's server refuses", b[:hd.size], k, v)
			}
		}
	}
}

var h1ParseSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /v1/event/e1/reservation HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 29\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n{\"areaId\":\"0\",\"numOfSeats\":2}",
	"GET /items/1?x=%20y HTTP/1.1\r\nHost: [::1]:80\r\nX-Many: a\r\nx-many: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
	"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 01\r\n\r\nx",
	"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9 \t\r\n\r\n",
	"DELETE /a;b HTTP/1.1\r\nHost: a_b\r\n\r\n",
	"GET /a?b HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a? HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a?b?c#d HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a!b(c)*[d] HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a:b@c$d&e+f,g=h HTTP/1.1\r\nHost: a\r\n\r\n",
}

// TestParseHeadAgreesWithNetHTTP runs the seeds (and the fuzz corpus,
// under go test -fuzz) through the property without fuzzing.
func TestParseHeadAgreesWithNetHTTP(t *testing.T) {
	lean := 0
	for _, s := range h1ParseSeeds {
		var hd h1Head
		hdr := http.Header{}
		if parseHead([]byte(s), &hd, hdr, leanBufSize) == headLean {
			lean++
			checkAgainstNetHTTP(t, []byte(s), &hd, hdr)
		}
	}
	if lean < 4 {
		t.Fatalf("only %d seeds parsed as lean; the property is not exercised", lean)
	}
}

// TestParseHeadAlternatingAllocates: a client alternating a POST with a
// body and a GET without (the compat flow: reserve, then read) has its
// later headers at other positions in every other request; their
// names, keys and repeated values still come from the connection's
// memo. Only the target's string is new per request.
func TestParseHeadAlternatingAllocates(t *testing.T) {
	post := []byte("POST /v1/event/e/reservation HTTP/1.1\r\nHost: a\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 99\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n")
	get := []byte("GET /v1/reservation/0195 HTTP/1.1\r\nHost: a\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n")
	var hd h1Head
	hdr := http.Header{}
	both := func() {
		for _, h := range [][]byte{post, get} {
			clear(hdr)
			if parseHead(h, &hd, hdr, leanBufSize) != headLean {
				t.Fatalf("%q not lean", h)
			}
		}
	}
	both()
	if n := testing.AllocsPerRun(100, both); n > 2 {
		t.Fatalf("%v allocations per POST and GET, want 2 (their targets)", n)
	}
}

// TestParseHeadReusesLinesRightly: a connection's memo of the previous
// request's lines never leaks into the next one's header, whatever
// changes between them (order, case, values, count).
func TestParseHeadReusesLinesRightly(t *testing.T) {
	heads := []string{
		"GET /a HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-b: 2\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-b: 2\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: b\r\nX-A: 3\r\nX-B: 2\r\n\r\n",
		"GET /a HTTP/1.1\r\nX-B: 2\r\nHost: b\r\nX-A: 3\r\nX-A: 4\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: b\r\nX-A:\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: b\r\nX-A: 5\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: b\r\nBad Name: 5\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: b\r\nX-A: 5\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: b\r\nContent-Length: 0\r\nX-A: 5\r\nx-a: 6\r\n\r\n",
		"GET /a HTTP/1.1\r\nx-a: 7\r\nHost: b\r\nX-C: 5\r\n\r\n",
	}
	var hd h1Head
	hdr := http.Header{}
	for _, h := range heads {
		clear(hdr)
		st := parseHead([]byte(h), &hd, hdr, leanBufSize)
		if strings.Contains(h, "Bad Name") {
			if st != headHandOff {
				t.Fatalf("%q: status %v", h, st)
			}
			continue
		}
		if st != headLean {
			t.Fatalf("%q: status %v", h, st)
		}
		checkAgainstNetHTTP(t, []byte(h), &hd, hdr)
	}
}
