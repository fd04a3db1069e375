package api

import (
	"net/http"
	"net/url"
	"strings"
)

// collapseSlashes serves a path with repeated slashes ("//api/customers",
// "/api/orders//x") as the path with single slashes, as Tomcat (the
// commerce peer's server) does. http.ServeMux would answer it a 307
// redirect to the clean path instead, which a client that joined a base
// URL ending in "/" to a route follows, if at all, at the cost of a round
// trip and (for POST) a resent body. Dot segments ("/./", "/../") are
// left to ServeMux's redirect: no client builds them by accident.
func collapseSlashes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "//") && !strings.Contains(r.URL.RawPath, "//") {
			next.ServeHTTP(w, r)
			return
		}
		u := *r.URL
		if u.RawPath != "" {
			raw := squeezeSlashes(u.RawPath)
			p, err := url.PathUnescape(raw)
			if err != nil { // not a path net/http would have parsed
				next.ServeHTTP(w, r)
				return
			}
			u.Path, u.RawPath = p, raw
		} else {
			u.Path = squeezeSlashes(u.Path)
		}
		r2 := new(http.Request)
		*r2 = *r
		r2.URL = &u
		next.ServeHTTP(w, r2)
	})
}

// squeezeSlashes replaces every run of slashes in p by one.
func squeezeSlashes(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}
