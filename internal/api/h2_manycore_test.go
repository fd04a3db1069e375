package api

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
)

// TestH2WholeBodyEndsWithItsLastBytes: a handler reading a body that has
// wholly arrived gets its last bytes and io.EOF from one Read, as from
// net/http's HTTP/1.1 body, rather than locking the connection a second
// time only to learn of the end; a short buffer gets the end with the
// read that empties the body, and the bytes are the client's.
func TestH2WholeBodyEndsWithItsLastBytes(t *testing.T) {
	mux, lean := leanRoute("POST /lean", func(w http.ResponseWriter, r *http.Request) {
		var got []byte
		reads := 0
		p := make([]byte, 64)
		for {
			n, err := r.Body.Read(p)
			got = append(got, p[:n]...)
			reads++
			if err != nil {
				fmt.Fprintf(w, "%d reads, last with %d bytes, %v, body %q", reads, n, err, got)
				return
			}
		}
	})
	_, addr := startServer(t, mux, leanH2(Limits{Lean: lean}), nil)
	for _, tc := range []struct {
		n    int
		want string
	}{
		{40, "1 reads, last with 40 bytes, EOF"},
		{64, "1 reads, last with 64 bytes, EOF"},
		{100, "2 reads, last with 36 bytes, EOF"},
	} {
		body := bytes.Repeat([]byte("y"), tc.n)
		a := h2Do(t, xh2Client(), "POST", "http://"+addr+"/lean", body, false)
		if want := fmt.Sprintf("%s, body %q", tc.want, body); string(a.body) != want {
			t.Errorf("%d bytes: %q, want %q", tc.n, a.body, want)
		}
	}
}
