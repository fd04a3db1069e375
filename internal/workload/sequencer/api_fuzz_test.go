package sequencer

import "testing"

// FuzzParseWait: ?wait= never panics, and what it accepts is a wait from 0
// to MaxWait; what it refuses gets a message.
func FuzzParseWait(f *testing.F) {
	for _, s := range []string{"", "10s", "500ms", "60", "61", "-1s", "1e9", "9223372036854775807", "1h", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, problem := parseWait(s)
		if problem != "" {
			if d != 0 {
				t.Fatalf("parseWait(%q) refused with %q but gave %v", s, problem, d)
			}
			return
		}
		if d < 0 || d > MaxWait || (s == "" && d != 0) {
			t.Fatalf("parseWait(%q) = %v, outside 0..%v", s, d, MaxWait)
		}
	})
}
