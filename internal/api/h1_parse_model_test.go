package api

import (
	"bytes"
	"net/http"
	"net/url"
	"reflect"
	"testing"
)

// parseHeadModel is the lean parser as it was before its one-pass line
// scan: the whole head checked for CRLF line ends first, then split. The
// one-pass parser must read every head as it does, except that it may
// hand off a head still arriving once one of its lines rules it out.
func parseHeadModel(b []byte, hd *h1Head, hdr http.Header, maxBody int64) headStatus {
	if hd.url == nil {
		hd.url = new(url.URL)
	}
	if hd.vals == nil {
		hd.vals = new(headerVals)
	}
	hd.vals.reset()
	end := bytes.Index(b, []byte("\r\n\r\n"))
	scan := b
	if end >= 0 {
		scan = b[:end+4]
	}
	for i, c := range scan {
		switch {
		case c == '\n' && (i == 0 || scan[i-1] != '\r'),
			c == '\r' && i+1 < len(scan) && scan[i+1] != '\n':
			return headHandOff
		}
	}
	if end < 0 {
		return headMore
	}
	hd.size = end + 4
	line, rest, _ := bytes.Cut(b[:end+2], []byte("\r\n"))
	if !parseRequestLine(line, hd) {
		return headHandOff
	}
	hd.host, hd.contentLength = "", -1
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && !bytes.Equal(trimOWS(value), bytes.Trim(value, " \t")) {
			panic("trimOWS is not bytes.Trim")
		}
		if !ok || len(name) == 0 {
			return headHandOff
		}
		if !parseHeaderLine(line, hd, hdr) {
			return headHandOff
		}
	}
	return finishHead(hd, maxBody)
}

func FuzzParseHeadAsModel(f *testing.F) {
	for _, s := range h1ParseSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r"))
	f.Add([]byte("GET / HTTP/1.1\r\nConnection: close\r\nHo"))
	f.Add([]byte("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want h1Head
		gotHdr, wantHdr := http.Header{}, http.Header{}
		gs := parseHead(b, &got, gotHdr, leanBufSize)
		ws := parseHeadModel(b, &want, wantHdr, leanBufSize)
		if gs != ws && !(ws == headMore && gs == headHandOff) {
			t.Fatalf("%q: status %d, the model %d", b, gs, ws)
		}
		if gs == headHandOff && ws == headMore {
			// Only a line the lean path refuses may hand a partial head
			// off early: the whole head is then refused as well.
			full := append(bytes.Clone(b), "\r\n\r\n"...)
			if s := parseHeadModel(full, new(h1Head), http.Header{}, leanBufSize); s != headHandOff {
				t.Fatalf("%q handed off early, but completed the model reads it as %d", b, s)
			}
		}
		if gs != headLean {
			return
		}
		if got.method != want.method || !bytes.Equal(got.target, want.target) || got.uri != want.uri ||
			got.host != want.host || got.contentLength != want.contentLength || got.size != want.size ||
			!reflect.DeepEqual(*got.url, *want.url) || !reflect.DeepEqual(gotHdr, wantHdr) {
			t.Fatalf("%q: read as %+v %v, the model %+v %v", b, got, gotHdr, want, wantHdr)
		}
	})
}
