// Package jsonscan has the byte-level primitives of the small hand-written
// JSON parsers on hot paths (the server's reservation body, the load
// generator's reservation reply), where encoding/json's reflection costs
// more than the rest of the request.
package jsonscan

// Scanner walks B from I.
type Scanner struct {
	B []byte
	I int
}

// WS skips JSON whitespace.
func (s *Scanner) WS() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Eat consumes c if it is next.
func (s *Scanner) Eat(c byte) bool {
	if s.I < len(s.B) && s.B[s.I] == c {
		s.I++
		return true
	}
	return false
}

// End reports whether only whitespace is left.
func (s *Scanner) End() bool {
	s.WS()
	return s.I == len(s.B)
}

// Null consumes a null literal if it is next.
func (s *Scanner) Null() bool {
	if len(s.B)-s.I >= 4 && string(s.B[s.I:s.I+4]) == "null" {
		s.I += 4
		return true
	}
	return false
}
