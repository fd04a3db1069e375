package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStringFlaws(t *testing.T) {
	for _, c := range []struct {
		in   string
		end  int
		want Flaw
	}{
		{`abc"`, 3, Flaw{}},
		{`a\"b"x`, 4, Flaw{}},
		{`a\u00e9\ud83d\ude00"`, 19, Flaw{}},
		{"a\x01b\"", 3, Flaw{Control, 1}},
		{"a\x7f\"", 2, Flaw{Control, 0x7f}},
		{`a\u001fb"`, 8, Flaw{Control, 0x1f}},
		{`a\nb"`, 4, Flaw{EscapedControl, 'n'}},
		{"a\xffb\"", 3, Flaw{Kind: BadUTF8}},
		{`\udc00"`, 6, Flaw{Kind: Surrogate}},
		{`\ud800x"`, 7, Flaw{Kind: Surrogate}},
		{`\ud800\u0041"`, 12, Flaw{Kind: Surrogate}},
		{"\x01\\t\"", 3, Flaw{Control, 1}}, // the first flaw is kept
		{`no end`, 6, Flaw{}},
	} {
		end, f := String([]byte(c.in), 0)
		if end != c.end || f != c.want {
			t.Errorf("String(%q) = %d, %+v; want %d, %+v", c.in, end, f, c.end, c.want)
		}
	}
}

// FuzzString: on a valid JSON string literal, String finds its closing
// quote, and says it is flawless exactly when its raw bytes are UTF-8 and
// what it decodes to has no control character (a lone surrogate, which
// decodes to U+FFFD, is the other flaw).
func FuzzString(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u0000"`, `"\ud800"`, "\"\xff\"", `"\t"`, `"\\"`, `"é\ud83d\ude00"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		var v string
		if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' || json.Unmarshal([]byte(lit), &v) != nil {
			return
		}
		end, fl := String([]byte(lit), 1)
		if end != len(lit)-1 {
			t.Fatalf("String(%q) ends at %d, not the closing quote", lit, end)
		}
		control := strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f })
		clean := utf8.ValidString(lit) && !control
		if (fl.Kind == NoFlaw) != (clean && (fl.Kind != Surrogate)) {
			t.Fatalf("String(%q) flaw %+v; raw UTF-8 %v, control in %q %v", lit, fl, utf8.ValidString(lit), v, control)
		}
		if fl.Kind == Surrogate && !strings.ContainsRune(v, utf8.RuneError) {
			t.Fatalf("String(%q) finds a lone surrogate, but it decodes to %q", lit, v)
		}
	})
}

// FuzzPlainString: what PlainString accepts, encoding/json decodes to
// the same bytes.
func FuzzPlainString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, "\"\x01\"", `"é"`, `"x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		s := Scanner{B: []byte(lit)}
		got, ok := s.PlainString()
		if !ok {
			return
		}
		var v string
		if err := json.Unmarshal([]byte(lit[:s.I]), &v); err != nil || v != string(got) {
			t.Fatalf("PlainString(%q) = %q; encoding/json: %q, %v", lit, got, v, err)
		}
	})
}

func TestRawString(t *testing.T) {
	for in, want := range map[string]string{`"a\"b" x`: `a\"b`, `""`: ``, `"é"`: `é`} {
		s := Scanner{B: []byte(in)}
		if got, ok := s.RawString(); !ok || string(got) != want {
			t.Errorf("RawString(%q) = %q, %v", in, got, ok)
		}
	}
	for _, in := range []string{`x`, `"abc`, "\"a\x01\"", `"ab\`} {
		s := Scanner{B: []byte(in)}
		if got, ok := s.RawString(); ok {
			t.Errorf("RawString(%q) = %q, accepted", in, got)
		}
	}
}

// FuzzSkip: Skip passes over exactly a valid JSON value that nests no
// deeper than its limit, and refuses one nesting deeper.
func FuzzSkip(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,-1],"b":{"c":null}}`, `[true,false,"x\"y"]`, ` 12 `, `[[[[1]]]]`, `"\u00e9"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if !json.Valid([]byte(doc)) {
			return
		}
		depth := nesting(doc)
		s := Scanner{B: []byte(doc)}
		s.WS()
		ok := s.Skip(0, 4)
		if depth > 5 {
			if ok {
				t.Fatalf("Skip passed %q, nested %d deep", doc, depth)
			}
			return
		}
		if !ok || !s.End() {
			t.Fatalf("Skip(%q) = %v, stopped at %d of %d", doc, ok, s.I, len(doc))
		}
	})
}

// nesting is how many objects and arrays deep doc goes.
func nesting(doc string) int {
	d, most, inStr := 0, 0, false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case !inStr && (c == '{' || c == '['):
			d++
			most = max(most, d)
		case !inStr && (c == '}' || c == ']'):
			d--
		}
	}
	return most
}

func TestField(t *testing.T) {
	b := []byte(`{"idx" : 1, "id" : "abc", "name":"x"}`)
	for name, want := range map[string]string{"id": "abc", "name": "x"} {
		if got := Field(b, name); string(got) != want {
			t.Errorf("Field(%s) = %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{"idx", "none"} {
		if got := Field(b, name); got != nil {
			t.Errorf("Field(%s) = %q, want nil", name, got)
		}
	}
	if got := Field([]byte(`{"id"`), "id"); got != nil {
		t.Errorf("a cut reply: %q", got)
	}
}

func TestLit(t *testing.T) {
	s := Scanner{B: []byte("nulltrue")}
	if !s.Lit("null") || s.Lit("false") || !s.Lit("true") || !s.End() {
		t.Fatal("Lit does not consume exactly its literal")
	}
}
