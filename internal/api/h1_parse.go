package api

import (
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// The lean path's request parser. It recognises only requests it can
// serve exactly as net/http would, and answers none itself: anything
// else, malformed or merely unusual, is handed to net/http with its
// bytes, and net/http's own checks and answers apply.

// headStatus is what parseHead found.
type headStatus int

const (
	headMore    headStatus = iota // the head has not all arrived
	headLean                      // a request the lean path serves
	headHandOff                   // for net/http
)

// h1Head is a parsed request head; target points into the read buffer.
type h1Head struct {
	method        string
	target        []byte
	uri           string   // target as a string: Request.RequestURI
	uriBefore     string   // the uri of the request before
	url           *url.URL // filled in; the caller's
	vals          *headerVals
	host          string
	contentLength int64
	size          int // bytes of the head, its blank line included
}

// leanMethods are the methods the lean path serves; HEAD (an answer
// without its body), CONNECT, OPTIONS and TRACE go to net/http.
var leanMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// parseHead parses the head at the start of b into hd and hdr (cleared by
// the caller). maxBody bounds the body the lean path takes.
//
// One pass over the lines, each found by IndexByte: every line must end
// in CRLF and hold no other CR (net/http also takes a bare LF or CR, and
// those requests are its to judge). A line the lean path will not serve
// hands the request off before the rest of its head has arrived: the
// whole head could only be handed off too, and net/http reads the rest.
func parseHead(b []byte, hd *h1Head, hdr http.Header, maxBody int64) headStatus {
	if hd.url == nil {
		hd.url = new(url.URL)
	}
	if hd.vals == nil {
		hd.vals = new(headerVals)
	}
	hd.vals.reset()
	hd.host, hd.contentLength = "", -1
	for pos, first := 0, true; ; first = false {
		n := bytes.IndexByte(b[pos:], '\n')
		if n < 0 {
			// A CR may end what has arrived: the start of a CRLF.
			if cr := bytes.IndexByte(b[pos:], '\r'); cr >= 0 && pos+cr != len(b)-1 {
				return headHandOff
			}
			return headMore
		}
		line := b[pos : pos+n]
		pos += n + 1
		if len(line) == 0 || line[len(line)-1] != '\r' {
			return headHandOff
		}
		line = line[:len(line)-1]
		if bytes.IndexByte(line, '\r') >= 0 {
			return headHandOff
		}
		switch {
		case first:
			if !parseRequestLine(line, hd) {
				return headHandOff
			}
		case len(line) == 0:
			hd.size = pos
			return finishHead(hd, maxBody)
		case !parseHeaderLine(line, hd, hdr):
			return headHandOff
		}
	}
}

// finishHead checks a whole head's host and length and parses its target.
func finishHead(hd *h1Head, maxBody int64) headStatus {
	if hd.host == "" || hd.contentLength > maxBody {
		return headHandOff
	}
	// The same target as one of the connection's last two requests (a
	// client's POSTs, between the GETs of what they made) keeps its
	// string.
	switch {
	case hd.uri == string(hd.target):
	case hd.uriBefore == string(hd.target):
		hd.uri, hd.uriBefore = hd.uriBefore, hd.uri
	default:
		hd.uri, hd.uriBefore = string(hd.target), hd.uri
	}
	if !parseTarget(hd.uri, hd.url) {
		u, err := url.ParseRequestURI(hd.uri)
		if err != nil {
			return headHandOff
		}
		*hd.url = *u
	}
	return headLean
}

func parseRequestLine(line []byte, hd *h1Head) bool {
	m, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return false
	}
	hd.method = ""
	for _, lm := range leanMethods {
		if string(m) == lm {
			hd.method = lm
		}
	}
	target, proto, ok := bytes.Cut(rest, []byte(" "))
	if !ok || hd.method == "" || string(proto) != "HTTP/1.1" || len(target) == 0 || target[0] != '/' ||
		bytes.Contains(target, []byte("//")) {
		// "//" is for collapseSlashes, in front of net/http's routing.
		return false
	}
	for _, c := range target {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	hd.target = target
	return true
}

func parseHeaderLine(line []byte, hd *h1Head, hdr http.Header) bool {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 || colon > maxLeanHeaderName {
		return false // also a line folded onto the previous one
	}
	name, value := line[:colon], trimOWS(line[colon+1:])
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	m := hd.vals.memo(name)
	key := m.keyOf(name)
	if key == "" {
		return false
	}
	switch key {
	case "Connection", "Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer", "Pragma", "Http2-Settings", "Proxy-Connection", "Keep-Alive":
		// They change how a request is read or answered (its connection,
		// its body's framing, an upgrade, a 100 Continue, Pragma's
		// rewrite into Cache-Control): net/http's to serve.
		return false
	case "Host":
		if hd.host != "" || !plainHost(value) {
			return false
		}
		hd.host = m.valueOf(value)
		return true // net/http keeps Host in Request.Host only
	case "Content-Length":
		n, ok := parseLength(value)
		if hd.contentLength >= 0 || !ok {
			return false
		}
		hd.contentLength = n
	}
	v := m.valueOf(value)
	if vv, ok := hdr[key]; ok {
		hdr[key] = append(vv, v)
	} else {
		hdr[key] = hd.vals.one(v)
	}
	return true
}

// trimOWS cuts the spaces and tabs around a header value.
func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// headerVals is a connection's store for header lines: one backing
// array for the slices of single values, and the name, key and value of
// each header line seen on the connection, which the next request
// usually repeats, so that neither costs an allocation or a
// canonicalisation per request.
type headerVals struct {
	slab []string
	prev []lineMemo
	pos  int
}

type lineMemo struct{ name, key, value string }

// maxSlab bounds the values kept in the slab and the lines remembered.
const maxSlab = 32

func (hv *headerVals) reset() { hv.slab, hv.pos = hv.slab[:0], 0 }

// memo is the memo of the next line, named name: the memo of the line
// at the same position in the last request if it had that name (a
// client sends the same headers in the same order), else that of an
// earlier line of that name (a client alternating a POST with a body and
// a GET without has its later headers at other positions), else a new
// one while there is room.
func (hv *headerVals) memo(name []byte) *lineMemo {
	pos := hv.pos
	hv.pos++
	if pos < len(hv.prev) && hv.prev[pos].name == string(name) {
		return &hv.prev[pos]
	}
	for i := range hv.prev {
		if hv.prev[i].name == string(name) {
			return &hv.prev[i]
		}
	}
	if len(hv.prev) == maxSlab {
		return &lineMemo{}
	}
	hv.prev = append(hv.prev, lineMemo{})
	return &hv.prev[len(hv.prev)-1]
}

// one returns []string{v} from the slab, its capacity cut so that an
// append copies it.
func (hv *headerVals) one(v string) []string {
	if hv.slab == nil {
		hv.slab = make([]string, 0, maxSlab)
	}
	if len(hv.slab) == cap(hv.slab) {
		return []string{v}
	}
	hv.slab = append(hv.slab, v)
	n := len(hv.slab)
	return hv.slab[n-1 : n : n]
}

// keyOf is name's canonical key, "" if name is no token.
func (m *lineMemo) keyOf(name []byte) string {
	if m.key != "" && m.name == string(name) {
		return m.key
	}
	for _, c := range name {
		if !isTokenByte(c) {
			return ""
		}
	}
	m.name, m.key, m.value = string(name), canonicalKey(name), ""
	return m.key
}

func (m *lineMemo) valueOf(v []byte) string {
	if m.value != string(v) {
		m.value = string(v)
	}
	return m.value
}

// parseTarget parses a plain origin-form target (a path of characters
// url.URL keeps as they are, and a query) into u as url.ParseRequestURI
// would, without allocating; false leaves it to url.ParseRequestURI.
func parseTarget(t string, u *url.URL) bool {
	path, query, hasQuery := strings.Cut(t, "?")
	for i := 0; i < len(path); i++ {
		if !plainPathByte(path[i]) {
			return false
		}
	}
	if strings.IndexByte(query, '#') >= 0 {
		return false
	}
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	return true
}

// plainPathByte: a byte url.URL neither unescapes nor would escape in a
// path, so Path is the target's path and RawPath stays empty.
func plainPathByte(c byte) bool { return byteClass[c]&classPath != 0 }

// maxLeanHeaderName: longer names (none in practice) go to net/http, so
// canonicalKey works on the stack.
const maxLeanHeaderName = 64

// isTokenByte: RFC 9110's tchar.
func isTokenByte(c byte) bool { return byteClass[c]&classToken != 0 }

// byteClass sorts bytes for the parser's scans, a table lookup per byte.
var byteClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		if '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' {
			t[c] |= classToken | classPath
		}
	}
	for _, c := range []byte("!#$%&'*+-.^_`|~") {
		t[c] |= classToken
	}
	for _, c := range []byte("-._~$&+,/:;=@") {
		t[c] |= classPath
	}
	return t
}()

const (
	classToken = 1 << iota
	classPath  // plainPathByte
)

// plainHost: a host name or address and port, nothing net/http's
// stricter checks could refuse.
func plainHost(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_':
		default:
			return false
		}
	}
	return true
}

// parseLength takes only a plain decimal length: no sign, no leading
// zero, no list (net/http's own rules for the rest).
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 15 || (v[0] == '0' && len(v) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// commonKeys are keys a request's header would otherwise allocate on
// each new connection.
var commonKeys = map[string]string{}

func init() {
	for _, k := range []string{"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Baggage", "Cache-Control",
		"Content-Length", "Content-Type", "Cookie", "Host", "Idempotency-Key", "Origin", "Referer",
		"Traceparent", "Tracestate", "User-Agent", "X-Forwarded-For", "X-Request-Id"} {
		commonKeys[k] = k
	}
}

func canonicalKey(name []byte) string {
	var buf [maxLeanHeaderName]byte
	c := buf[:len(name)]
	upper := true
	for i, b := range name {
		switch {
		case upper && 'a' <= b && b <= 'z':
			b -= 'a' - 'A'
		case !upper && 'A' <= b && b <= 'Z':
			b += 'a' - 'A'
		}
		c[i] = b
		upper = b == '-'
	}
	if s, ok := commonKeys[string(c)]; ok {
		return s
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}
