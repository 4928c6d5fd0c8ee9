package proxy

// CooldownEntries is how many cooldowns the handler caches.
func CooldownEntries(h *Handler) int { return h.cool.Len() }
