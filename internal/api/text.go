package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/surge-run/surge/internal/jsonscan"
)

// The rules for the names, ids and keys clients send, one per kind of
// field, used by every transport (HTTP bodies, paths and queries, gRPC
// messages) so that a value one accepts the other accepts too. Each
// returns what is wrong with the value, in words that follow its field's
// name ("queue_name " + problem), or "".
//
// All of them refuse invalid UTF-8, control characters (U+0000–U+001F,
// U+007F–U+009F) and the Unicode bidirectional controls (U+202A–U+202E,
// U+2066–U+2069, which make a name display as another: "Trojan Source").

// IsBidiControl reports whether r is a Unicode explicit bidirectional
// embedding, override or isolate character.
func IsBidiControl(r rune) bool {
	return 0x202a <= r && r <= 0x202e || 0x2066 <= r && r <= 0x2069
}

// CheckName is the rule for names that name a thing (a queue, a group, a
// worker, a processor, a consumer): 1 to max bytes of printable text and
// nothing path-like ('/', '\', "..", or "." alone), since names end up
// in URL paths, logs and operators' commands.
func CheckName(s string, max int) string {
	if p := checkLen(s, 1, max); p != "" {
		return p
	}
	if p := checkIdent(s); p != "" {
		return p
	}
	if i := strings.IndexAny(s, `/\`); i >= 0 {
		return fmt.Sprintf("contains %q at byte %d; a name is not a path", s[i], i)
	}
	if s == "." || strings.Contains(s, "..") {
		return `is or contains a path's dots ("." or ".."); a name is not a path`
	}
	return ""
}

// CheckID is the rule for ids and keys a client picks (a message id, an
// idempotency key): min to max bytes of printable text. Unlike a name
// it may hold '/' ("order/17").
func CheckID(s string, min, max int) string {
	if p := checkLen(s, min, max); p != "" {
		return p
	}
	return checkIdent(s)
}

// CheckMessage is the rule for free text a program reports (a failed
// job's error message, often the tail of a process's stderr): at most max
// bytes of valid UTF-8 without NUL. Other control characters (line
// breaks, terminal colours) and bidi controls are kept, as the peers keep
// them: refusing them would lose the outcome of work already done.
// Whoever displays such text escapes it.
func CheckMessage(s string, max int) string {
	if len(s) > max {
		return fmt.Sprintf("must be at most %d bytes, got %d", max, len(s))
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8; send text as UTF-8"
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Sprintf("contains NUL (U+0000) at byte %d", i)
	}
	return ""
}

func checkLen(s string, min, max int) string {
	if len(s) < min || len(s) > max {
		if min == 0 {
			return fmt.Sprintf("must be at most %d bytes, got %d", max, len(s))
		}
		return fmt.Sprintf("must be %d to %d bytes, got %d", min, max, len(s))
	}
	return ""
}

func checkIdent(s string) string {
	for i, r := range s {
		if p := checkRune(s, i, r); p != "" {
			return p
		}
	}
	return ""
}

// checkRune is the character rule all the above share.
func checkRune(s string, i int, r rune) string {
	switch {
	case r == utf8.RuneError:
		if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
			return fmt.Sprintf("is not valid UTF-8 (byte %d); send text as UTF-8", i)
		}
	case r < 0x20 || 0x7f <= r && r <= 0x9f:
		return fmt.Sprintf("contains the control character U+%04X at byte %d; text must be printable", r, i)
	case IsBidiControl(r):
		return fmt.Sprintf("contains the bidirectional control U+%04X at byte %d, which makes text display as other text", r, i)
	}
	return ""
}

// CheckJSONText is the rule for a JSON document a client stores and
// others read back (a sequencer payload): valid JSON whose strings are
// valid UTF-8 without control characters (raw or escaped, as CheckStrings)
// and without bidi controls (raw or escaped).
func CheckJSONText(b []byte) string {
	if p := CheckStrings(b); p != "" {
		return p
	}
	if !json.Valid(b) {
		return "is not valid JSON"
	}
	return checkBidiJSON(b)
}

// checkBidiJSON finds a bidi control in b, raw or as a \u escape.
func checkBidiJSON(b []byte) string {
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '\\' && i+1 < len(b):
			if b[i+1] == 'u' {
				if r, ok := jsonscan.Hex4(b, i+2); ok && IsBidiControl(r) {
					return fmt.Sprintf("contains the bidirectional control U+%04X (escaped, at byte %d), which makes text display as other text", r, i)
				}
			}
			i++ // an escaped character is not the start of another escape
		case b[i] >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[i:])
			if IsBidiControl(r) {
				return fmt.Sprintf("contains the bidirectional control U+%04X at byte %d, which makes text display as other text", r, i)
			}
			i += size - 1
		}
	}
	return ""
}
