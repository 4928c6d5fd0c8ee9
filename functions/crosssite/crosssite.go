// Package crosssite tells a request a browser sent from a page of another
// origin. Without a master key (dev mode, a local process only) the
// gateway and the admin API authenticate nobody, so a page of any site
// the operator's browser opens could drive them: create a pause on /, a
// rule, a key, or call models with the operator's provider keys (a fetch
// with mode "no-cors" and no Content-Type needs no preflight). A browser
// says where a request comes from; clients that are not browsers (curl,
// the SDKs, a server) send neither header. So in dev mode the handlers
// refuse what Is reports, and everything else goes as before.
package crosssite

import (
	"net/http"
	"net/url"
	"strings"
)

// Is reports whether a browser sent r from a page of another origin than
// the server's: Sec-Fetch-Site other than same-origin (a navigation the
// user typed is "none"; another port of localhost is "same-site", and
// refused), or, from a browser that sends no Sec-Fetch-Site, an Origin
// that is not the request's own host.
func Is(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
	default:
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false // not a browser, or a same-origin GET
	}
	u, err := url.Parse(origin)
	return err != nil || !strings.EqualFold(u.Host, r.Host)
}

// Message explains the refusal.
const Message = "a request from a page of another origin is refused: this process runs without a master key (dev mode), " +
	"so it takes requests only from its own pages and from clients that are not browsers"
