// Package adminui is the admin API's dashboard: one page and its script
// and style, embedded, served at GET /admin/ui. The page holds no data; it
// reads everything from the admin API with the master key the user signs
// in with, so serving it needs no key, and its Content-Security-Policy
// lets it load nothing but these files (and a data: icon) and talk to
// nothing but its origin. tests/dashboard_test.go holds the page to that.
package adminui

import (
	"embed"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// CSP is the page's Content-Security-Policy: its own script and style
// only (no inline code, no eval), fetches to its own origin, no frames,
// no forms that navigate, no base-URL tricks.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// files are what the page is made of, by the path it is served at, with
// their content types.
var files = map[string]struct{ name, contentType string }{
	"/admin/ui":         {"assets/index.html", "text/html; charset=utf-8"},
	"/admin/ui/app.js":  {"assets/app.js", "text/javascript; charset=utf-8"},
	"/admin/ui/app.css": {"assets/app.css", "text/css; charset=utf-8"},
}

// Owns reports whether the path is the page's.
func Owns(path string) bool { return path == "/admin/ui" || strings.HasPrefix(path, "/admin/ui/") }

// ServeHTTP serves the page's files.
func ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/admin/ui/" {
		// The page's relative URLs assume no trailing slash.
		http.Redirect(w, r, "../ui", http.StatusMovedPermanently)
		return
	}
	f, ok := files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	b, err := assets.ReadFile(f.name)
	if err != nil {
		http.Error(w, "missing asset", http.StatusInternalServerError)
		return
	}
	h.Set("Content-Type", f.contentType)
	_, _ = w.Write(b)
}
