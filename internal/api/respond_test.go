package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuoteClipsLongInput(t *testing.T) {
	if got := Quote("abc\x00"); got != `"abc\x00"` {
		t.Errorf("short input: %s", got)
	}
	exact := strings.Repeat("x", MaxEcho)
	if got := Quote(exact); got != strconv.Quote(exact) {
		t.Errorf("input of exactly MaxEcho bytes was cut: %s", got)
	}
	for _, s := range []string{
		strings.Repeat("a", 60<<10),
		strings.Repeat("é", 40<<10),          // a cut in the middle of a character
		strings.Repeat("\x80", 60<<10),       // only continuation bytes
		strings.Repeat("\x00\"\\", 20<<10),   // everything escaped
		strings.Repeat("a", 63) + "€" + "zz", // the cut falls inside "€"
	} {
		got := Quote(s)
		if len(got) > 8*MaxEcho || !strings.HasSuffix(got, "… ("+strconv.Itoa(len(s))+" bytes)") || !utf8.ValidString(got) {
			t.Errorf("Quote of %d bytes starting %.10q: %d bytes %q", len(s), s, len(got), got)
		}
		q := got[:strings.LastIndex(got, "…")]
		prefix, err := strconv.Unquote(q)
		if err != nil || !strings.HasPrefix(s, prefix) || len(prefix) < MaxEcho-utf8.UTFMax {
			t.Errorf("Quote of %.10q: %q is not a quoted prefix of the input (%v)", s, q, err)
		}
	}
}

func TestIsJSONType(t *testing.T) {
	for v, want := range map[string]bool{
		"application/json":                  true,
		"Application/JSON":                  true,
		"application/json; charset=utf-8":   true,
		" application/json ;charset=UTF-8":  true,
		"application/problem+json":          true,
		"application/vnd.api+JSON; v=1":     true,
		"text/plain":                        false,
		"application/x-www-form-urlencoded": false,
		"application/jsonx":                 false,
		"application/+json":                 false,
		"application/a/b+json":              false,
		"application/":                      false,
		"json":                              false,
		"text/json":                         false,
		"multipart/form-data; boundary=x":   false,
	} {
		if got := IsJSONType(v); got != want {
			t.Errorf("IsJSONType(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestCheckBody(t *testing.T) {
	cases := []struct {
		ct     []string
		length int64
		want   int
	}{
		{nil, 10, 0},
		{[]string{""}, 10, 0},
		{[]string{"application/json"}, 100, 0},
		{[]string{"application/json"}, -1, 0}, // unknown length: the reader's limit decides
		{[]string{"application/json"}, 101, 413},
		{[]string{"text/plain"}, 10, 415},
		{[]string{"application/json", "text/plain"}, 10, 415},
		{[]string{"text/plain"}, 1e9, 413}, // size first: nothing about the body is worth reading
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", "/", nil)
		r.ContentLength = c.length
		if c.ct != nil {
			r.Header["Content-Type"] = c.ct
		}
		w := httptest.NewRecorder()
		if got := CheckBody(w, r, 100); got != c.want || (c.want != 0 && w.Code != c.want) {
			t.Errorf("Content-Type %q, length %d: returned %d, wrote %d; want %d", c.ct, c.length, got, w.Code, c.want)
		}
		if c.want == 0 {
			continue
		}
		var e struct{ Error string }
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("Content-Type %q, length %d: body %q is not a JSON error", c.ct, c.length, w.Body)
		}
		if c.want == 413 && w.Header().Get("Connection") != "close" {
			t.Errorf("413 without Connection: close; net/http would then wait for the body before answering")
		}
		if c.want == 415 && !strings.Contains(e.Error, "application/json") {
			t.Errorf("415 does not say what to send: %s", e.Error)
		}
	}
	// An echoed Content-Type is clipped like any client string.
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Content-Type", "text/"+strings.Repeat("x", 10000))
	w := httptest.NewRecorder()
	if CheckBody(w, r, 100) != http.StatusUnsupportedMediaType || w.Body.Len() > 400 {
		t.Errorf("a 10 KB Content-Type: %d, %d-byte answer", w.Code, w.Body.Len())
	}
}

// TestCheckBodyDoesNotAllocate: it runs on every reservation.
func TestCheckBodyDoesNotAllocate(t *testing.T) {
	r := httptest.NewRequest("POST", "/", nil)
	r.ContentLength = 90
	r.Header.Set("Content-Type", "application/json; charset=utf-8")
	w := httptest.NewRecorder()
	if n := testing.AllocsPerRun(100, func() {
		if CheckBody(w, r, 100) != 0 {
			t.Fatal("refused")
		}
	}); n != 0 {
		t.Errorf("CheckBody allocates %v times per call", n)
	}
}

// TestWriteDeclaresLength: every reply Write sends carries its
// Content-Length over HTTP/1.1 and h2c (HEAD too), whether Write set it
// (large bodies) or left it to the server (small ones).
func TestWriteDeclaresLength(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		sizes := []int{0, 3, implicitLengthMax, implicitLengthMax + 1, 5000, 70 << 10}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			Write(w, http.StatusOK, true, []byte(strings.Repeat("x", n)))
		})
		_, addr := startServer(t, h, Limits{}, nil)
		for _, c := range []struct {
			name   string
			client *http.Client
		}{{"HTTP/1.1", &http.Client{}}, {"h2c", h2cClient()}} {
			for _, n := range sizes {
				for _, method := range []string{http.MethodGet, http.MethodHead} {
					req, _ := http.NewRequest(method, "http://"+addr+"/?n="+strconv.Itoa(n), nil)
					resp, err := c.client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.ContentLength != int64(n) || resp.Header.Get("Content-Length") != strconv.Itoa(n) || len(resp.TransferEncoding) != 0 {
						t.Errorf("%s %s of %d bytes: Content-Length %q (%d), Transfer-Encoding %v", c.name, method, n,
							resp.Header.Get("Content-Length"), resp.ContentLength, resp.TransferEncoding)
					}
					if method == http.MethodGet && len(body) != n {
						t.Errorf("%s GET: %d bytes of body, want %d", c.name, len(body), n)
					}
				}
			}
		}
	})
}

// TestAppendStringRoundTrips: what AppendString writes decodes to the
// string given (invalid UTF-8 to U+FFFD, as encoding/json does), through
// the plain fast path and the escaping one alike.
func TestAppendStringRoundTrips(t *testing.T) {
	for _, s := range []string{"", "user123", "event-00000000-0000-4000-8000-000000000000",
		`quote " here`, `back\slash`, "tab\tnew\nline\r", "\x00\x01\x1f", "é€😀", "bad \xff utf-8", "<&>", "end\""} {
		enc := AppendString([]byte("x"), s)
		var got string
		if err := json.Unmarshal(enc[1:], &got); err != nil {
			t.Fatalf("%q: %s is not a JSON string: %v", s, enc[1:], err)
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if got != want {
			t.Errorf("%q: decodes to %q, want %q", s, got, want)
		}
	}
}

// TestLimitedBody: a body declared within the limit is read as it is (its
// server ends it at its length); one undeclared or declared over the
// limit stops at the limit with http.MaxBytesError, as MaxBytesReader.
func TestLimitedBody(t *testing.T) {
	const limit = 100
	for _, tc := range []struct {
		name     string
		declared int64
		body     int
		same     bool // the request's own body
		over     bool // reading ends in *http.MaxBytesError
	}{
		{"declared within", 10, 10, true, false},
		{"declared at the limit", limit, limit, true, false},
		{"undeclared within", -1, 10, false, false},
		{"undeclared over", -1, 2 * limit, false, true},
		{"declared over", 2 * limit, 2 * limit, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("x", tc.body)))
			r.ContentLength = tc.declared
			b := LimitedBody(httptest.NewRecorder(), r, limit)
			if same := b == r.Body; same != tc.same {
				t.Fatalf("the request's own body: %v, want %v", same, tc.same)
			}
			_, err := io.ReadAll(b)
			var mbe *http.MaxBytesError
			if over := errors.As(err, &mbe); over != tc.over {
				t.Fatalf("read error %v; want a MaxBytesError: %v", err, tc.over)
			}
		})
	}
}
