package admission

import (
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// StreamLimit bounds a stream: MaxDuration, when positive, is how long
// it may run before the gateway ends it with the protocol's own error
// event (after what was sent; its slot given back, what it used
// settled); CutAtReservation ends it where its output reaches the
// output reservation, by sending the reservation upstream as the
// request's cap, so that the upstream itself ends the stream there,
// cleanly and with exact usage.
type StreamLimit struct {
	MaxDuration      time.Duration
	CutAtReservation bool
}

// streamLimit is the bound of the stream admitted with lr by d: its
// class's, and the shortest max_stream_duration of the max_streams rules
// that admitted it. With CutAtReservation, a cap above the reservation (or none) is lowered
// to it where the request is sent, and the answer says so as a clamp
// does.
func (a *Admission) streamLimit(lr limiter.Request, d limiter.Decision) StreamLimit {
	if !a.req.Stream {
		return StreamLimit{}
	}
	sl := a.o.cfg.Streams[a.req.Caller.Class]
	if d.Lease != nil && d.Lease.MaxStreamDuration > 0 && (sl.MaxDuration == 0 || d.Lease.MaxStreamDuration < sl.MaxDuration) {
		sl.MaxDuration = d.Lease.MaxStreamDuration
	}
	if !sl.CutAtReservation || a.req.Body == nil || lr.OutputTokens <= 0 {
		return sl
	}
	perChoice := lr.OutputTokens / max(a.req.Choices, 1)
	if perChoice > 0 && (a.req.MaxTokens <= 0 || perChoice < a.req.MaxTokens) && a.req.Body.Clamp(perChoice) {
		a.logf("capping the stream at its reservation (cut_at_reservation)", "class", a.req.Caller.Class, "max_tokens", perChoice)
		a.trace.clamped(perChoice)
		a.req.MaxTokens = perChoice
	}
	return sl
}
