// Package console is the operator's web console that `surge serve`
// serves at /ui/: a few static files embedded in the binary (no build
// step, no CDN) whose script reads and acts through the server's public
// APIs with the operator's token, as any other client does.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Path is where the console is served; the mux pattern is "GET " + Path.
const Path = "/ui/"

//go:embed assets
var assets embed.FS

// contentSecurityPolicy lets the page load only its own files and talk
// only to its own origin: no inline script or style, no frames, no
// forms posting elsewhere. A token the page holds cannot be sent to
// another origin by injected markup.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console's files under Path with the headers that
// keep a page holding a token safe.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Path, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change only with the binary; a restart to a new
		// version must not leave a stale script in a browser.
		h.Set("Cache-Control", "no-cache")
		if strings.HasSuffix(r.URL.Path, "/") && r.URL.Path != Path {
			http.NotFound(w, r) // no directory listings
			return
		}
		files.ServeHTTP(w, r)
	})
}
