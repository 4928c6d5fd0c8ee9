package proxy

import (
	"encoding/json"

	"github.com/tollgate/tollgate/providers/jsonx"
)

// CooldownEntries is how many cooldowns the handler caches.
func CooldownEntries(h *Handler) int { return h.adm.CooldownEntries() }

// ParseChat and DecodeChat read a chat body the fast way and the
// decoder's, for comparing them.
func ParseChat(b []byte) (any, bool) {
	r, ok := parseChat(b, jsonx.Check(b).Valid)
	return r, ok
}

func DecodeChat(b []byte) (any, error) {
	var r chatRequest
	err := json.Unmarshal(b, &r)
	return r, err
}
