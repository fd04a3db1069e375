package api

import (
	"mime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzIsJSONType checks the allocation-free Content-Type test against
// mime.ParseMediaType wherever that parses the value.
func FuzzIsJSONType(f *testing.F) {
	for _, s := range []string{"application/json", "Application/JSON; charset=utf-8", "application/problem+json", "application/+json",
		"text/plain", "application/json x", "application/a/b+json", " application/json ;", "application/json;;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := IsJSONType(v)
		mt, _, err := mime.ParseMediaType(v)
		if err != nil {
			return
		}
		sub, isApp := strings.CutPrefix(mt, "application/")
		want := isApp && (sub == "json" || len(sub) > len("+json") && strings.HasSuffix(sub, "+json"))
		if got != want {
			t.Fatalf("IsJSONType(%q) = %v; media type %q says %v", v, got, mt, want)
		}
	})
}

// FuzzQuote: the echo of any client string is short, valid text that
// unquotes to a prefix of the input.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "abc", strings.Repeat("é", 40), strings.Repeat("\x80", 100), "\x00\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		if len(q) > 4*MaxEcho+40 || !utf8.ValidString(q) {
			t.Fatalf("Quote(%q) = %q", s, q)
		}
		if i := strings.LastIndex(q, "…"); len(s) > MaxEcho {
			if i < 0 || !strings.HasSuffix(q, "("+strconv.Itoa(len(s))+" bytes)") {
				t.Fatalf("Quote of %d bytes does not give the length: %q", len(s), q)
			}
			q = q[:i]
		}
		p, err := strconv.Unquote(q)
		if err != nil || !strings.HasPrefix(s, p) {
			t.Fatalf("Quote(%q) = %q is not a quoted prefix (%v)", s, q, err)
		}
	})
}

// FuzzSqueezeSlashes: the squeezed path has no repeated slash, keeps
// every other byte in order, and squeezing again changes nothing.
func FuzzSqueezeSlashes(f *testing.F) {
	for _, s := range []string{"", "/", "//", "//api//customers/", "/api/orders//x", "a///b", "/%2F/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := squeezeSlashes(p)
		if strings.Contains(got, "//") {
			t.Fatalf("squeezeSlashes(%q) = %q keeps a repeated slash", p, got)
		}
		if squeezeSlashes(got) != got {
			t.Fatalf("squeezing %q twice changed it", p)
		}
		if strings.ReplaceAll(got, "/", "") != strings.ReplaceAll(p, "/", "") || (strings.Contains(p, "/") != strings.Contains(got, "/")) {
			t.Fatalf("squeezeSlashes(%q) = %q lost or added something other than slashes", p, got)
		}
	})
}
