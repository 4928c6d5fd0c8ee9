package admission

import (
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// Request is what admission needs of a request: what it asks for and who
// asks, already parsed and bounded by the gateway.
type Request struct {
	// ID is unique per request; the leases of its attempts are named
	// after it.
	ID string
	// Model is what the client named; Route, when set, is the resolution
	// to use instead (passthrough names its provider in the URL, a batch
	// its provider in a header).
	Model string
	Route *providers.Route
	// Provider, when Model and Route are unset, is the provider the
	// request goes to, with no model (a batch submission).
	Provider string
	Op       providers.Op
	// Stream is set when the request asks for its answer as a stream.
	Stream bool
	// Caller is who asks.
	Caller Caller
	// InputTokens is the gateway's estimate of the prompt; MaxTokens the
	// client's own output cap (0: none); Choices the completions it asks
	// for (n, candidateCount; 0 or 1 is one).
	InputTokens int64
	MaxTokens   int64
	Choices     int64
	// UserPathOnly admits by the consumer's rules only, holding no slot
	// (batch submissions); NoOutput reserves no output (embeddings,
	// audio); Free charges nothing at all (token counting); Session holds
	// a Realtime session's lease past the answer.
	UserPathOnly bool
	NoOutput     bool
	Free         bool
	Session      bool
	// Body, when set, is what admission may ask of the request's body.
	Body Body
}

// Body is a request's body as admission sees it.
type Body interface {
	// Needs says what the request needs of a model (read of the body
	// only when a target other than its first choice is considered).
	Needs() Needs
	// Clamp lowers the request's output cap to n where the request is
	// sent, reporting whether it could; admission calls it when it
	// decides to clamp (Config.ClampFloor) or to cut a stream at its
	// reservation.
	Clamp(n int64) bool
}

// Caller is who sends a request.
type Caller struct {
	UserPath string
	KeyID    string // the managed key's id; "" for the master key
	Tags     []limiter.Tag
	// Class is the request's traffic class ("" for none: it waits for
	// nothing).
	Class string
}

// chargedInput is the input a request reserves.
func (r *Request) chargedInput() int64 {
	if r.Free {
		return 0
	}
	return min(max(r.InputTokens, 0), limiter.MaxAmount)
}
