package api

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// h1TestMux has lean routes that answer in every way net/http's writer
// distinguishes, and a plain route. Served with the limits h1Limits
// makes: their gate can panic outside any route.
func h1TestMux() (http.Handler, *LeanRoutes) {
	mux := http.NewServeMux()
	m := NewMetrics(prometheus.NewRegistry())
	m.HandleLean(mux, "GET /items/{id}", h1Items)
	m.HandleLean(mux, "DELETE /items/{id}", h1Items)
	// Two wildcards, a literal beside one that is not lean, a subtree:
	// the lean decision is the mux's own match.
	m.HandleLean(mux, "GET /pair/{x}/and/{id}", h1Items)
	m.Handle(mux, "GET /pair/lit/and/{id}", h1Items)
	m.HandleLean(mux, "GET /tree/{rest...}", h1Items)
	m.HandleLean(mux, "POST /echo", func(w http.ResponseWriter, r *http.Request) int {
		var v map[string]any
		if st := ReadJSON(w, r, 64, &v); st != 0 {
			return st
		}
		return h1Describe(w, r, fmt.Sprint(v))
	})
	m.HandleLean(mux, "POST /raw", func(w http.ResponseWriter, r *http.Request) int {
		q := r.URL.Query()
		switch {
		case q.Has("noread"):
			return h1Describe(w, r, "")
		case q.Has("close"):
			r.Body.Close()
			return h1Describe(w, r, "")
		}
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, 16)); err != nil {
			return BodyError(w, err)
		}
		return h1Describe(w, r, buf.String())
	})
	m.Handle(mux, "GET /plain", func(w http.ResponseWriter, r *http.Request) int {
		return h1Describe(w, r, "plain")
	})
	m.HandleFallback(mux)
	return mux, m.Lean()
}

// h1Limits are lim with a gate that panics, outside any route, on a
// request with X-Panic. The mux stays the server's handler, so that the
// lean path's dispatch (leanDispatch) runs as in Surge.
func h1Limits(lim Limits) Limits {
	lim.Gate = func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Panic") != "" {
				panic("outside any route")
			}
			next.ServeHTTP(w, r)
		})
	}
	return lim
}

// h1Describe answers with what the handler saw of the request.
func h1Describe(w http.ResponseWriter, r *http.Request, body string) int {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q %q %q %q %s len=%d host=%q body=%q pattern=%q x=%q id=%q rest=%q\n", r.Method, r.RequestURI, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Proto, r.ContentLength, r.Host, body,
		r.Pattern, PathValue(w, r, "x"), PathValue(w, r, "id"), PathValue(w, r, "rest"))
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range r.Header {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, r.Header[k])
	}
	Write(w, http.StatusOK, true, []byte(b.String()))
	return http.StatusOK
}

func h1Items(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	h := w.Header()
	switch {
	case q.Has("panic"):
		panic("in the route")
	case q.Has("big"):
		h.Set("Content-Type", "text/plain")
		w.Write(bytes.Repeat([]byte("x"), 3000))
	case q.Has("sniff"):
		io.WriteString(w, "<html><body>hi</body></html>")
	case q.Has("status"):
		st, _ := strconv.Atoi(q.Get("status"))
		h.Set("X-Kept", "yes")
		h.Set("Content-Type", "text/plain")
		w.WriteHeader(st)
		io.WriteString(w, "body")
	case q.Has("close"):
		h.Set("Connection", "close")
		io.WriteString(w, "closing")
	case q.Has("short"):
		h.Set("Content-Length", "10")
		io.WriteString(w, "short")
	case q.Has("cl"):
		h.Set("Content-Length", "4")
		io.WriteString(w, "four")
	case q.Has("badcl"):
		h.Set("Content-Length", "x")
		io.WriteString(w, "bad length")
	case q.Has("empty"):
	case q.Has("identity"):
		h.Set("Transfer-Encoding", "identity")
		io.WriteString(w, "identity")
	case q.Has("many"):
		h.Add("Set-Cookie", "a=1")
		h.Add("Set-Cookie", "b=2")
		h["lower"] = []string{"v"}
		return h1Describe(w, r, "")
	default:
		return h1Describe(w, r, PathValue(w, r, "id"))
	}
	return 200
}

// h1Cases are requests sent to a server with the lean path and one
// without; each is written in the segments given, a pause between them.
var h1Cases = []struct {
	name string
	segs []string
}{
	{"get", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n"}},
	{"delete", []string{"DELETE /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"query and escapes", []string{"GET /items/a%20b?x=1&y=%2F HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"escaped slash", []string{"GET /items/a%2Fb HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"repeated and odd headers", []string{"GET /items/1 HTTP/1.1\r\nhost: a:80\r\nx-a: 1\r\nX-A: 2\r\nX-Empty:\r\nX-Tab: \tv \t\r\nX-Utf8: caf\xc3\xa9\r\n\r\n"}},
	{"post json", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"a\":\"b\"}"}},
	{"post split head and body", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nConte", "nt-Length: 9\r\n\r\n{\"a\"", ":\"b\"}"}},
	// A line net/http is to serve, in a head still arriving: handed off
	// before the rest of it.
	{"expect in a split head", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nConte", "nt-Length: 2\r\n\r\n", "{}"}},
	{"close in a split head", []string{"GET /items/1 HTTP/1.1\r\nConnection: close\r\nHo", "st: a\r\n\r\n"}},
	{"post bad json", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n{nope"}},
	{"post not json", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"}},
	{"post over the declared limit", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("x", 100)}},
	{"body over MaxBytesReader", []string{"POST /raw HTTP/1.1\r\nHost: a\r\nContent-Length: 40\r\n\r\n" + strings.Repeat("y", 40) + "GET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"body within MaxBytesReader", []string{"POST /raw HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nabcdGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"body not read", []string{"POST /raw?noread HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nabcdGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"body closed unread", []string{"POST /raw?close HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nabcdGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"post no length", []string{"POST /raw HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"get with a body", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"body larger than the lean buffer", []string{"POST /raw HTTP/1.1\r\nHost: a\r\nContent-Length: 10000\r\n\r\n" + strings.Repeat("z", 10000)}},
	{"pipelined", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\n\r\nPOST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}GET /items/3 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	// The connection hands every request the same Request, made anew
	// from a blank one: nothing of one route's request may show in the
	// next's (pattern, path values), and a target seen two requests
	// before (the POST between GETs) keeps its string.
	{"routes in turn, targets repeated", []string{"GET /pair/p/and/1 HTTP/1.1\r\nHost: a\r\n\r\n", "GET /tree/a/b HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", "GET /items/2?q=1 HTTP/1.1\r\nHost: b\r\nX-Once: 1\r\n\r\n",
		"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", "GET /items/3 HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", "GET /pair/p/and/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"keep-alive", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\n\r\n", "GET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n", "GET /items/3 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"lean then plain then lean", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\n\r\n", "GET /plain HTTP/1.1\r\nHost: a\r\n\r\n", "GET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"not found", []string{"GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"method not allowed", []string{"PUT /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"head", []string{"HEAD /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"options", []string{"OPTIONS /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"connection close", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"connection keep-alive", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n"}},
	{"http/1.0", []string{"GET /items/1 HTTP/1.0\r\nHost: a\r\n\r\n"}},
	{"http/1.0 keep-alive", []string{"GET /items/1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /items/2 HTTP/1.0\r\n\r\n"}},
	{"expect", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n", "{}"}},
	{"upgrade", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"}},
	{"chunked body", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"}},
	{"pragma", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n"}},
	{"answers: big", []string{"GET /items/1?big HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: sniffed", []string{"GET /items/1?sniff HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: 204", []string{"GET /items/1?status=204 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: 304", []string{"GET /items/1?status=304 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: 599", []string{"GET /items/1?status=599 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: 103 then 200", []string{"GET /items/1?status=103 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: close", []string{"GET /items/1?close HTTP/1.1\r\nHost: a\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: short", []string{"GET /items/1?short HTTP/1.1\r\nHost: a\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: own length", []string{"GET /items/1?cl HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: bad own length", []string{"GET /items/1?badcl HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: empty", []string{"GET /items/1?empty HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: identity", []string{"GET /items/1?identity HTTP/1.1\r\nHost: a\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"answers: many headers", []string{"GET /items/1?many HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"route panic", []string{"GET /items/1?panic HTTP/1.1\r\nHost: a\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"panic outside the routes", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-Panic: 1\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"double slash", []string{"GET //items//1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"two wildcards", []string{"GET /pair/a%20b/and/c%2Fd?q=1 HTTP/1.1\r\nHost: a\r\n\r\nGET /pair/%E2%82%AC/and/%25 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"literal beside a wildcard", []string{"GET /pair/lit/and/1 HTTP/1.1\r\nHost: a\r\n\r\nGET /pair/lit2/and/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"wildcards, head and wrong method", []string{"HEAD /pair/a/and/b HTTP/1.1\r\nHost: a\r\n\r\nPOST /pair/a/and/b HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"}},
	{"wildcards, trailing slash and dots", []string{"GET /pair/a/and/b/ HTTP/1.1\r\nHost: a\r\n\r\nGET /pair/./and/b HTTP/1.1\r\nHost: a\r\n\r\nGET /pair/a/and/../b HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"wildcards, empty segment", []string{"GET /pair//and/b HTTP/1.1\r\nHost: a\r\n\r\nGET /pair/a/and/ HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"subtree wildcard", []string{"GET /tree/a/b%2Fc/d HTTP/1.1\r\nHost: a\r\n\r\nGET /tree/ HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"absolute target", []string{"GET http://b/items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"bad escape", []string{"GET /items/%zz HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"no host", []string{"GET /items/1 HTTP/1.1\r\n\r\n"}},
	{"two hosts", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"}},
	{"bad host", []string{"GET /items/1 HTTP/1.1\r\nHost: a b\r\n\r\n"}},
	{"bad length", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n"}},
	{"two lengths", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}"}},
	{"negative length", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"}},
	{"bare LF", []string{"GET /items/1 HTTP/1.1\nHost: a\n\n"}},
	{"folded header", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n 2\r\n\r\n"}},
	{"space before colon", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-A : 1\r\n\r\n"}},
	{"control in value", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-A: a\x01b\r\n\r\n"}},
	{"no colon", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-A\r\n\r\n"}},
	{"bad request line", []string{"GET\r\n\r\n"}},
	{"unknown method", []string{"FETCH /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"bad method", []string{"G(T /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"http/2 version", []string{"GET /items/1 HTTP/2.0\r\nHost: a\r\n\r\n"}},
	{"garbage", []string{"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03"}},
	{"partial head then EOF", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\n"}},
	{"partial body then EOF", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\n{\"a\""}},
	{"empty line first", []string{"\r\nGET /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"long header within MaxHeaderBytes", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-Long: " + strings.Repeat("l", 12<<10) + "\r\n\r\n"}},
	{"header over MaxHeaderBytes", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-Long: " + strings.Repeat("l", MaxHeaderBytes+8<<10) + "\r\n\r\n"}},
	{"long target", []string{"GET /items/" + strings.Repeat("t", 9<<10) + " HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"lean then plain pipelined", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\n\r\nGET /plain HTTP/1.1\r\nHost: a\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"lean then chunked pipelined", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\n\r\nPOST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"lean then http/1.0 pipelined", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\n\r\nGET /items/2 HTTP/1.0\r\nHost: a\r\n\r\n"}},
	{"length and chunked", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"comma-joined lengths", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2, 2\r\n\r\n{}"}},
	{"plus length", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: +2\r\n\r\n{}"}},
	{"leading zero length", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 02\r\n\r\n{}"}},
	{"spaced length", []string{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length:  2 \t\r\n\r\n{}"}},
	{"bare CR", []string{"GET /items/1 HTTP/1.1\r\nHost: a\rX-A: 1\r\n\r\n"}},
	{"NUL in name", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-\x00A: 1\r\n\r\n"}},
	{"NUL in value", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-A: \x00\r\n\r\n"}},
	{"folded host", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\n b\r\n\r\n"}},
	{"lower-case transfer-encoding", []string{"POST /echo HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"}},
	{"empty host", []string{"GET /items/1 HTTP/1.1\r\nHost:\r\n\r\n"}},
	{"asterisk target", []string{"GET * HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"fragment in target", []string{"GET /items/1#x HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"two spaces in request line", []string{"GET  /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"lower-case method", []string{"get /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"second request straddles the buffer", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("p", 5000) + "\r\n\r\nPOST /echo HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("q", 4000) + "\r\nContent-Length: 9\r\n\r\n{\"a\":\"b\"}GET /items/3 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"body straddles the buffer", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("p", 7000) + "\r\n\r\nPOST /raw HTTP/1.1\r\nHost: a\r\nContent-Length: 16\r\n\r\n0123456789abcdefGET /items/3 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"head exactly the buffer", []string{"GET /items/1 HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("p", 8192-len("GET /items/1 HTTP/1.1\r\nHost: a\r\nX-Pad: \r\n\r\n")) + "\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: a\r\n\r\n"}},
	{"nothing", nil},
}

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)

// exchange writes segs to addr, shuts its side, and reads everything the
// server sends until it closes.
func exchange(t *testing.T, addr string, segs []string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, hang)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(hang))
	for i, s := range segs {
		if i > 0 {
			time.Sleep(20 * time.Millisecond) // a segment of its own
		}
		if _, err := io.WriteString(c, s); err != nil {
			break // the server closed: what it answered is read below
		}
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading: %v", err)
	}
	return dateLine.ReplaceAllString(string(got), "Date: (now)\r")
}

// TestLeanH1AnswersAsNetHTTP: every request of the corpus gets, byte for
// byte but the Date, the same answers (and the same close) from a server
// with the lean path as from one without.
func TestLeanH1AnswersAsNetHTTP(t *testing.T) {
	h, lean := h1TestMux()
	leanSrv, leanAddr := startServer(t, h, h1Limits(Limits{Lean: lean}), nil)
	_, stdAddr := startServer(t, h, h1Limits(Limits{}), nil)
	for _, tc := range h1Cases {
		t.Run(tc.name, func(t *testing.T) {
			want := exchange(t, stdAddr, tc.segs)
			got := exchange(t, leanAddr, tc.segs)
			if got != want {
				t.Errorf("lean path answered\n%q\nnet/http answered\n%q", got, want)
			}
		})
	}
	if n := leanSrv.h1.served.Load(); n < 30 {
		t.Errorf("the lean path served %d requests of the corpus; it is not exercised", n)
	}
}

// TestLooselyKeepsDeadlinesWithinTheirSlack: over asks at random times,
// a loosened deadline never falls before the one asked for nor more than
// the slack after it, and moves at most once per slack of time passed.
func TestLooselyKeepsDeadlinesWithinTheirSlack(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, timeout := range []time.Duration{0, time.Millisecond, 30 * time.Second, DefaultIdleTimeout} {
		slack := timeout / deadlineSlack
		start := time.Unix(1_700_000_000, 0)
		now, set, moves := start, time.Time{}, 0
		for range 10_000 {
			now = now.Add(time.Duration(rng.Int64N(int64(slack/3) + 2)))
			if rng.IntN(50) == 0 {
				set = aLongTimeAgo // the watch's abort, or a hand-off's zero
			}
			d := now.Add(timeout)
			got := loosely(set, d, timeout)
			if got.Before(d) || got.After(d.Add(slack)) {
				t.Fatalf("timeout %v: asked %v, got %v: outside [d, d+%v]", timeout, d, got, slack)
			}
			if got != set {
				moves++
				set = got
			}
		}
		if bound := 10_000/50*2 + int(now.Sub(start)/max(slack, 1)) + 1; slack > 0 && moves > bound {
			t.Errorf("timeout %v: %d moves over %v, more than %d", timeout, moves, now.Sub(start), bound)
		}
	}
}
