package api

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

var textSeeds = []string{
	"", "q", "default", "orders-eu", "a\tb", "a\x00b", "a\x7fb", "a\u0085b", "invoice\u202efdp.exe", "a\u2066b", "a\u2069b",
	"a\u200fb", "../x", "a/b", `a\b`, "..", ".", "a..b", "a.b", "\xff", "a\xc3", "é", "日本語", "🎫", "\ufeffbom",
	"line 1\nline 2", "tab\there", "cr\r", "\x1b[31mred", strings.Repeat("x", 300),
}

// printable reports whether s is what the name and id rules ask of text:
// valid UTF-8 without control characters or bidi controls.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || 0x7f <= r && r <= 0x9f || IsBidiControl(r) {
			return false
		}
	}
	return true
}

// FuzzCheckName: an accepted name is 1 to max bytes of printable text with
// no '/', '\' or "..", and a refused one gets a message.
func FuzzCheckName(f *testing.F) {
	for _, s := range textSeeds {
		f.Add(s, 256)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max = max%300 + 1
		if max < 1 {
			max += 300
		}
		if p := CheckName(s, max); p != "" {
			return
		}
		if len(s) < 1 || len(s) > max || !printable(s) || strings.ContainsAny(s, `/\`) || strings.Contains(s, "..") || s == "." {
			t.Fatalf("CheckName(%q, %d) accepted it", s, max)
		}
	})
}

// FuzzCheckID: an accepted id is min to max bytes of printable text.
func FuzzCheckID(f *testing.F) {
	for _, s := range textSeeds {
		f.Add(s, 0, 128)
		f.Add(s, 1, 128)
	}
	f.Fuzz(func(t *testing.T, s string, min, max int) {
		min, max = min&1, max%300
		if max < min {
			max = min
		}
		if p := CheckID(s, min, max); p != "" {
			return
		}
		if len(s) < min || len(s) > max || !printable(s) {
			t.Fatalf("CheckID(%q, %d, %d) accepted it", s, min, max)
		}
	})
}

// FuzzCheckMessage: accepted text is at most max bytes of UTF-8 without
// NUL, and all such text is accepted.
func FuzzCheckMessage(f *testing.F) {
	for _, s := range textSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		const max = 4096
		ok := CheckMessage(s, max) == ""
		want := len(s) <= max && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
		if ok != want {
			t.Fatalf("CheckMessage(%q) accepted %v, want %v", s, ok, want)
		}
	})
}

// FuzzCheckJSONText: an accepted document is valid JSON in which every
// string, key or value, decoded, is printable (encoding/json would turn
// invalid UTF-8 into U+FFFD, which the raw bytes' check sees first).
func FuzzCheckJSONText(f *testing.F) {
	for _, s := range []string{`1`, `null`, `"a"`, `{"k":"v"}`, `["a\u0000"]`, `"a\nb"`, "\"a\u202eb\"", `"\u202E"`, `"\\u202e"`,
		`{"\u2066":1}`, "\"\xff\"", `"\ud800"`, `"\ud83c\udfab"`, `{"a":[1,2,{"b":"é"}]}`, `{`, ``, `1 2`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckJSONText(b) != "" {
			return
		}
		if !json.Valid(b) || !utf8.Valid(b) {
			t.Fatalf("CheckJSONText(%q) accepted what is not UTF-8 JSON", b)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("CheckJSONText(%q) accepted it, but it does not decode: %v", b, err)
		}
		walkStrings(v, func(s string) {
			// The rule of every HTTP body's strings (C1 controls are
			// allowed there), plus no bidi control.
			for _, r := range s {
				if r < 0x20 || r == 0x7f || IsBidiControl(r) {
					t.Fatalf("CheckJSONText(%q) accepted the string %q", b, s)
				}
			}
		})
	})
}

func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case []any:
		for _, e := range x {
			walkStrings(e, f)
		}
	case map[string]any:
		for k, e := range x {
			f(k)
			walkStrings(e, f)
		}
	}
}
