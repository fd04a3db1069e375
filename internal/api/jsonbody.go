package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// DecodeJSON decodes b into v and returns what is wrong with it, if
// anything, in words for the client: malformed JSON, a field of the wrong
// type, or a string that is not valid UTF-8 or holds a control character
// (encoding/json would silently turn invalid UTF-8 into U+FFFD, so only
// the raw body can tell).
func DecodeJSON(b []byte, v any) string {
	if err := json.Unmarshal(b, v); err != nil {
		return JSONProblem(err)
	}
	return CheckStrings(b)
}

// JSONProblem words an encoding/json error for the client.
func JSONProblem(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Sprintf("request body must be a JSON object, not %s", te.Value)
		}
		v := te.Value
		if len(v) > MaxEcho {
			v = Quote(v)
		}
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), v)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: body ends early"
	}
	return "malformed JSON: " + err.Error()
}

func jsonKind(k string) string {
	switch k {
	case "int", "int32", "int64", "uint8":
		// "must be a number, not number 1.5" read as a contradiction.
		return "a whole number"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct":
		return "an object"
	}
	return k
}

// CheckStrings finds the first string literal in the JSON text b that is
// not valid UTF-8 or holds a control character, and names its field.
func CheckStrings(b []byte) string {
	var key []byte // the last object key, to name the field
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		start := i + 1
		end, problem := scanString(b, start)
		j := end + 1
		for j < len(b) && (b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r') {
			j++
		}
		isKey := j < len(b) && b[j] == ':'
		if problem != "" {
			if isKey {
				return "an object key " + problem
			}
			if key == nil {
				return "a string " + problem
			}
			return "field " + Quote(string(key)) + " " + problem
		}
		if isKey {
			key = b[start:end]
		}
		i = end
	}
	return ""
}

// CheckText applies CheckStrings' rule to a decoded string (a path or
// query value).
func CheckText(s string) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return "is not valid UTF-8; send text as UTF-8"
			}
		case r < 0x20 || r == 0x7f:
			return fmt.Sprintf("contains the control character U+%04X; text must be printable", r)
		}
	}
	return ""
}

func scanString(b []byte, i int) (end int, problem string) {
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i, problem
		case c == '\\':
			n, p := scanEscape(b, i)
			if problem == "" {
				problem = p
			}
			i += n
		case c < 0x20 || c == 0x7f:
			if problem == "" {
				problem = fmt.Sprintf("contains the control character U+%04X; text must be printable", c)
			}
			i++
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 && problem == "" {
				problem = "is not valid UTF-8; send text as UTF-8"
			}
			i += size
		}
	}
	return len(b), problem
}

func scanEscape(b []byte, i int) (int, string) {
	if i+1 >= len(b) {
		return 1, ""
	}
	switch b[i+1] {
	case 'b', 'f', 'n', 'r', 't':
		return 2, fmt.Sprintf("contains a control character (\\%c); text must be printable", b[i+1])
	case 'u':
	default:
		return 2, ""
	}
	r, ok := hex4(b, i+2)
	if !ok {
		return 2, ""
	}
	switch {
	case r < 0x20 || r == 0x7f:
		return 6, fmt.Sprintf("contains the control character U+%04X; text must be printable", r)
	case 0xdc00 <= r && r <= 0xdfff:
		return 6, "contains half of a UTF-16 surrogate pair, which is not a character; send text as UTF-8"
	case 0xd800 <= r && r <= 0xdbff:
		if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if lo, ok := hex4(b, i+8); ok && 0xdc00 <= lo && lo <= 0xdfff {
				return 12, ""
			}
		}
		return 6, "contains half of a UTF-16 surrogate pair, which is not a character; send text as UTF-8"
	}
	return 6, ""
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}
