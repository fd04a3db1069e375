package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/surge-run/surge/internal/jsonscan"
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

// scanString scans a string literal (jsonscan.String) and words its
// first flaw for the client.
func scanString(b []byte, i int) (end int, problem string) {
	end, f := jsonscan.String(b, i)
	switch f.Kind {
	case jsonscan.Control:
		problem = fmt.Sprintf("contains the control character U+%04X; text must be printable", f.R)
	case jsonscan.EscapedControl:
		problem = fmt.Sprintf("contains a control character (\\%c); text must be printable", f.R)
	case jsonscan.BadUTF8:
		problem = "is not valid UTF-8; send text as UTF-8"
	case jsonscan.Surrogate:
		problem = "contains half of a UTF-16 surrogate pair, which is not a character; send text as UTF-8"
	}
	return end, problem
}
