package openai

import (
	"testing"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/sse"
)

// hasOutput tells a chunk with output from one without, on its fast path
// (compact text) and on the member-by-member one.
func TestHasOutput(t *testing.T) {
	for choices, want := range map[string]bool{
		`[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]`:                                 true,
		`[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]`:    false,
		`[{"index":0,"delta":{"content": "spaced"}}]`:                                                    true,
		`[{"index":0,"delta":{"content":null,"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]`: true,
		`[{"index":0,"delta":{"refusal":"no"}}]`:                                                         true,
		`[{"index":0,"delta":{},"logprobs":{"content":[]},"finish_reason":"stop"}]`:                      false,
		`[{"index":0,"delta":{"role":"assistant","name":"\"content\":\"x"}}]`:                            false,
		`[]`: false,
	} {
		if got := hasOutput([]byte(choices)); got != want {
			t.Errorf("hasOutput(%s) = %v, want %v", choices, got, want)
		}
	}
}

// BenchmarkChatStreamChunk is what the gateway does with each chunk of a
// chat stream: find its choices and usage, and whether it carries text.
func BenchmarkChatStreamChunk(b *testing.B) {
	ev := sse.Event{Data: []byte(`{"id":"chatcmpl-C1xw2Wq3M0Zz1yQ","object":"chat.completion.chunk","created":1755000000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_560af6e559","choices":[{"index":0,"delta":{"content":" How"},"logprobs":null,"finish_reason":null}],"usage":null}`)}
	b.ReportAllocs()
	for b.Loop() {
		var res providers.Result
		chatStream(ev, &res, false)
		if res.Usage.OutputTokens != 1 {
			b.Fatal("no output counted")
		}
	}
}
