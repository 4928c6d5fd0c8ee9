package proxy

import (
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/functions/crosssite"
	"github.com/tollgate/tollgate/providers"
)

// refuseCrossSite answers 403, in the protocol the path implies, a
// request a browser sent from a page of another origin (crosssite.Is),
// and reports whether it did. For dev mode: with a master key, such a
// request has no key to send.
func refuseCrossSite(w http.ResponseWriter, r *http.Request) bool {
	if !crosssite.Is(r) {
		return false
	}
	writeError(w, protocolOf(r.URL.Path), apiError{status: http.StatusForbidden, typ: errTypePermission, code: "cross_site_request",
		message: crosssite.Message}, 0)
	return true
}

// protocolOf is the protocol a path implies: Anthropic's under
// /v1/messages, Gemini's under /v1beta/ (or a model:action path),
// OpenAI's otherwise.
func protocolOf(p string) providers.Protocol {
	switch {
	case p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/") || strings.HasPrefix(p, "/v1/complete"):
		return providers.ProtocolAnthropic
	case strings.HasPrefix(p, "/v1beta/") || strings.HasPrefix(p, "/v1/models/") && strings.Contains(p, ":"):
		return providers.ProtocolGemini
	}
	return providers.ProtocolOpenAI
}
