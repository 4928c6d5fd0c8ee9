// Package providers holds tollgate's upstream adapters: each sends a
// request to one provider instance, translating it from the client's
// protocol where the provider speaks another, streams the answer back chunk
// by chunk, and reports the usage it carried.
//
// An adapter implements the small Provider interface. Optional abilities
// (listing models, say) are separate interfaces checked by type assertion.
package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Protocol is the API shape a client speaks on a route.
type Protocol uint8

const (
	ProtocolOpenAI    Protocol = iota + 1 // OpenAI's REST API
	ProtocolAnthropic                     // Anthropic's Messages API
	ProtocolGemini                        // Gemini's generateContent API
)

// Op is the operation a request asks for.
type Op uint8

const (
	OpChat        Op = iota + 1 // POST /v1/chat/completions
	OpResponses                 // POST /v1/responses
	OpEmbeddings                // POST /v1/embeddings
	OpMessages                  // POST /v1/messages (Anthropic)
	OpAudio                     // /v1/audio/*
	OpBatches                   // POST /v1/batches
	OpGenerate                  // Gemini generateContent / streamGenerateContent
	OpPassthrough               // /p/{provider}/…: sent as is
	OpCountTokens               // Anthropic count_tokens, Gemini countTokens: free upstream
	OpRealtime                  // POST /v1/realtime/client_secrets, /v1/realtime/sessions: a session's credentials
)

// opNames are the operations' names, indexed by Op (read on every
// admission: an index, not a map lookup).
var opNames = [...]string{
	OpChat: "chat", OpResponses: "responses", OpEmbeddings: "embeddings", OpMessages: "messages",
	OpAudio: "audio", OpBatches: "batches", OpGenerate: "generate", OpPassthrough: "passthrough",
	OpCountTokens: "count_tokens", OpRealtime: "realtime",
}

// ParseOp returns the operation of a route name ("chat", "messages", …).
func ParseOp(name string) (Op, bool) {
	for o, n := range opNames {
		if n != "" && n == name {
			return Op(o), true
		}
	}
	return 0, false
}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Request is one call to send upstream.
type Request struct {
	Op     Op
	Model  string // the model id at this provider (after alias resolution)
	Stream bool
	// Body is the client's request body. Adapters must not modify it: a
	// failover sends the same body to the next target.
	Body []byte
	// Once says Body is JSON that gives each member of each object once
	// (jsonx.Check found no duplicate): a member is looked for only as far
	// as its first occurrence.
	Once bool
	// Path is the upstream path for audio and passthrough calls, e.g.
	// "/v1/audio/transcriptions"; Query its query string.
	Path  string
	Query string
	// Header carries the client headers worth forwarding (content type,
	// accept, anthropic-version, …); never the client's credentials.
	Header http.Header
	// Method is the HTTP method of passthrough calls.
	Method string
	// InputTokens and MaxTokens are the gateway's own estimate of the
	// prompt and the output cap it reserved for (the mock answers with
	// them).
	InputTokens int64
	MaxTokens   int64
	// Class is the request's traffic class ("interactive", "batch", …),
	// for providers that map classes to a service tier.
	Class string
}

// Usage is what an answer reports having used.
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64 // prompt-cache reads
	// CachedInInput says InputTokens counts the cache reads too (OpenAI,
	// Gemini), as the provider counts them towards its limits; Anthropic
	// counts them apart.
	CachedInInput bool
	// CacheWriteInputTokens are the prompt tokens written to the cache, a
	// part of InputTokens (Anthropic and Bedrock count them as input).
	CacheWriteInputTokens int64
	// Reported is false when the upstream gave no usage (or the stream broke
	// before it): the counts are then at most what was seen.
	Reported bool
}

// Result is what Serve reports about a call whose answer it wrote.
type Result struct {
	Status int
	Usage  Usage
	// Limits are the upstream's rate-limit headers, parsed (zero when it
	// sent none).
	Limits UpstreamLimits
	// BatchID is the id of a batch the upstream accepted (OpBatches).
	BatchID string
	// SessionID is the id of the Realtime session whose credentials the
	// upstream minted (OpRealtime).
	SessionID string
}

// BatchPoller is a provider whose batches the reconciler can follow to
// their end, to charge what they used.
type BatchPoller interface {
	PollBatch(ctx context.Context, id string) (BatchOutcome, error)
}

// BatchOutcome is what a poll found.
type BatchOutcome struct {
	// Done is set once the batch ended (completed, failed, expired or
	// cancelled): its usage is final.
	Done   bool
	Status string
	// Usage is what its requests used, by the model that served them.
	Usage map[string]Usage
}

// UpstreamLimits is a provider's view of its own limits, read from its
// response headers.
type UpstreamLimits struct {
	// RetryAfter is how long the provider asked to wait (429s).
	RetryAfter time.Duration
	// RemainingRequests / RemainingTokens are -1 when not reported.
	RemainingRequests int64
	RemainingTokens   int64
	// ResetRequests / ResetTokens are how long until those reset.
	ResetRequests time.Duration
	ResetTokens   time.Duration
	// LimitRequests / LimitTokens are the limits the upstream enforces
	// (per minute for OpenAI, Azure and Anthropic); 0 or less when not
	// reported.
	LimitRequests int64
	LimitTokens   int64
}

// ReportsLimits reports whether the upstream said what its limits are.
func (l UpstreamLimits) ReportsLimits() bool { return l.LimitRequests > 0 || l.LimitTokens > 0 }

// Provider is one upstream instance.
type Provider interface {
	// Name is the instance name rules and targets refer to.
	Name() string
	// Serve sends req upstream and writes the answer to w in the protocol
	// of the client's route, chunk by chunk when streaming.
	//
	// When the upstream fails before anything was written (a connection
	// error, a timeout, a 5xx, a 429), Serve writes nothing and returns an
	// *Error, so the caller may try another target or answer itself. Once
	// it has written the status, it returns the Result and a nil error even
	// if the stream later breaks (the Result's usage is then not Reported).
	Serve(ctx context.Context, w http.ResponseWriter, req *Request) (Result, error)
}

// Error is an upstream failure that happened before any byte was written
// to the client.
type Error struct {
	Provider string
	Status   int // the upstream's status; 0 for a transport failure
	// Body is the upstream's error body, at most a few KiB, for the caller
	// to relay when there is no other target.
	Body   []byte
	Header http.Header
	Limits UpstreamLimits
	Err    error
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("provider %s: %v", e.Provider, e.Err)
	}
	return fmt.Sprintf("provider %s: upstream status %d", e.Provider, e.Status)
}

func (e *Error) Unwrap() error { return e.Err }

// RateLimited reports whether the upstream answered 429.
func (e *Error) RateLimited() bool { return e.Status == http.StatusTooManyRequests }

// Retryable reports whether another target may succeed where this one
// failed: transport errors, timeouts, 5xx and 429.
func (e *Error) Retryable() bool {
	return e.Status == 0 || e.Status >= 500 || e.Status == http.StatusTooManyRequests || e.Status == http.StatusRequestTimeout
}

// ErrUnsupported is returned (wrapped) when a provider cannot serve an
// operation or protocol at all.
var ErrUnsupported = errors.New("not supported by this provider")

// ModelLister is implemented by providers that know which models they
// serve, for GET /v1/models.
type ModelLister interface {
	Models() []string
}

// Burndowner is implemented by providers whose quota counts each output
// token of some models as several (Bedrock's output burndown), for rules
// with Bedrock's quota arithmetic.
type Burndowner interface {
	// OutputBurndown returns how many quota tokens one output token of
	// model counts for: at least 1.
	OutputBurndown(model string) int64
}

// Supporter is implemented by providers that can say up front which
// operations they serve, so the gateway can pick one for operations that
// name no model (batch submissions).
type Supporter interface {
	Supports(Op) bool
}

// RealtimeSessionID reads the session id from an answer to
// /v1/realtime/client_secrets ({"value":…,"session":{"id":…}}) or
// /v1/realtime/sessions ({"id":…,"client_secret":…}).
func RealtimeSessionID(answer []byte) string {
	var a struct {
		ID      string `json:"id"`
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if json.Unmarshal(answer, &a) != nil {
		return ""
	}
	if a.Session.ID != "" {
		return a.Session.ID
	}
	return a.ID
}
