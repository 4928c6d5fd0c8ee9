package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/providers"
)

// errStreamTooLong is the cause of a stream's context ending at its
// max_stream_duration.
var errStreamTooLong = errors.New("the stream ran past its max_stream_duration")

// errCodeStreamDuration is the code of the error event that ends such a
// stream.
const errCodeStreamDuration = "stream_duration_exceeded"

// streamContext is the context a streaming request is sent upstream
// with: ended at its limit's MaxDuration, when it has one.
func streamContext(ctx context.Context, ex *exchange, sl admission.StreamLimit) (context.Context, context.CancelFunc) {
	if !ex.stream || sl.MaxDuration <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, sl.MaxDuration, errStreamTooLong)
}

// streamCut reports whether the stream sent with ctx was ended by its
// duration, not by the client (parent).
func streamCut(ctx, parent context.Context) bool {
	return parent.Err() == nil && errors.Is(context.Cause(ctx), errStreamTooLong)
}

// endStream ends a stream cut at its duration with the protocol's own
// error event, after what was sent: OpenAI's error chunk then [DONE]
// (chat; the Responses API's error event), Anthropic's error event,
// Gemini's error object. A stream cut before its first byte is answered
// with the protocol's 504 instead.
func (h *Handler) endStream(w http.ResponseWriter, ex *exchange, sl admission.StreamLimit, reqID string, wrote bool) {
	msg := "the stream ran past its longest duration (" + sl.MaxDuration.String() + ") and was ended by the gateway"
	h.log.Info("stream ended at its max_stream_duration", "request_id", reqID, "user_path", ex.caller.UserPath,
		"class", ex.caller.Class, "max_stream_duration_ms", sl.MaxDuration.Milliseconds(), "started", wrote)
	if !wrote {
		writeError(w, ex.proto, apiError{status: http.StatusGatewayTimeout, typ: errTypeServer, code: errCodeStreamDuration, message: msg}, 0)
		return
	}
	_, _ = w.Write(streamErrorEvent(ex.proto, ex.op, msg))
	_ = http.NewResponseController(w).Flush()
}

// streamErrorEvent is the event that ends a stream with an error in
// proto's shape.
func streamErrorEvent(proto providers.Protocol, op providers.Op, msg string) []byte {
	var ev []byte
	switch {
	case proto == providers.ProtocolAnthropic:
		b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": "timeout_error", "message": msg}})
		ev = append(append([]byte("event: error\ndata: "), b...), "\n\n"...)
	case proto == providers.ProtocolGemini:
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": http.StatusGatewayTimeout, "message": msg, "status": geminiStatus[http.StatusGatewayTimeout]}})
		ev = append(append([]byte("data: "), b...), "\n\n"...)
	case op == providers.OpResponses:
		b, _ := json.Marshal(map[string]any{"type": "error", "code": errCodeStreamDuration, "message": msg, "param": nil})
		ev = append(append([]byte("event: error\ndata: "), b...), "\n\n"...)
	default:
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": errTypeServer, "param": nil, "code": errCodeStreamDuration}})
		ev = append(append([]byte("data: "), b...), "\n\ndata: [DONE]\n\n"...)
	}
	return ev
}
