package clientconn

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The token goes on every request without changing the caller's; a CA
// file is refused with an http:// URL, and a file that holds no
// certificate is named.
func TestConfigure(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Get("Authorization") }))
	defer srv.Close()
	rt, err := Configure(&http.Transport{}, srv.URL, false, Options{Token: "surge_t"})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got != "Bearer surge_t" || req.Header.Get("Authorization") != "" {
		t.Errorf("server saw %q; caller's request has %q", got, req.Header.Get("Authorization"))
	}
	if _, err := Configure(&http.Transport{}, "http://h:1", true, Options{CAFile: "/x/ca.pem"}); err == nil || !strings.Contains(err.Error(), "/x/ca.pem") {
		t.Errorf("CA file with http://: %v", err)
	}
	if _, err := Configure(&http.Transport{}, "https://h:1", true, Options{CAFile: "/x/ca.pem"}); err == nil || !strings.Contains(err.Error(), "/x/ca.pem") {
		t.Errorf("missing CA file: %v", err)
	}
	if _, err := Configure(&http.Transport{}, "ftp://h", true, Options{}); err == nil {
		t.Error("ftp:// accepted")
	}
}
