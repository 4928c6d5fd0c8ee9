package proxy

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tollgate/tollgate/providers"
)

// The event that ends a stream cut at its duration is each protocol's own
// error event, its JSON whole.
func TestStreamErrorEventPerProtocol(t *testing.T) {
	for _, c := range []struct {
		name   string
		proto  providers.Protocol
		op     providers.Op
		event  string // the event's name, "" for none
		field  string // where the error's kind is
		want   string
		suffix string
	}{
		{"openai chat", providers.ProtocolOpenAI, providers.OpChat, "", "error.code", "stream_duration_exceeded", "data: [DONE]\n\n"},
		{"openai responses", providers.ProtocolOpenAI, providers.OpResponses, "error", "code", "stream_duration_exceeded", ""},
		{"anthropic", providers.ProtocolAnthropic, providers.OpMessages, "error", "error.type", "timeout_error", ""},
		{"gemini", providers.ProtocolGemini, providers.OpGenerate, "", "error.status", "DEADLINE_EXCEEDED", ""},
	} {
		ev := streamErrorEvent(c.proto, c.op, "too long")
		first, rest, _ := bytes.Cut(ev, []byte("\n\n"))
		if string(rest) != c.suffix {
			t.Errorf("%s: after the event %q, want %q", c.name, rest, c.suffix)
		}
		lines := bytes.Split(first, []byte("\n"))
		if c.event != "" {
			if string(lines[0]) != "event: "+c.event {
				t.Errorf("%s: %q, want event %s", c.name, lines[0], c.event)
			}
			lines = lines[1:]
		}
		var v map[string]any
		if len(lines) != 1 || json.Unmarshal(bytes.TrimPrefix(lines[0], []byte("data: ")), &v) != nil {
			t.Fatalf("%s: not one data line of JSON: %q", c.name, ev)
		}
		var at any = v
		for _, k := range bytes.Split([]byte(c.field), []byte(".")) {
			at = at.(map[string]any)[string(k)]
		}
		if at != c.want {
			t.Errorf("%s: %s is %v, want %s", c.name, c.field, at, c.want)
		}
	}
}
