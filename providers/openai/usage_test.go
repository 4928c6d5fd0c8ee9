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
	var seen chunkStart // the stream's chunks share their start
	b.ReportAllocs()
	for b.Loop() {
		var res providers.Result
		chatStream(ev, &res, false, &seen)
		if res.Usage.OutputTokens != 1 {
			b.Fatal("no output counted")
		}
	}
}

// A stream's chunks are read from where the members they share end, and
// read as each alone would be: the same output counted and the same
// usage found, whether a chunk shares the start of the one before, not
// quite (more space, another id), or puts choices first.
func TestChatStreamReadsEachChunkAsAlone(t *testing.T) {
	const head = `{"id":"c1","object":"chat.completion.chunk","model":"m",`
	chunks := []string{
		head + `"choices":[{"delta":{"role":"assistant","content":""}}],"usage":null}`,
		head + `"choices":[{"delta":{"content":"Hi"}}],"usage":null}`,
		head + ` "choices":[{"delta":{"content":"spaced"}}],"usage":null}`,
		head + `"choices":[{"delta":{"content":"!"}}],"usage":null}`,
		`{"id":"c2","object":"chat.completion.chunk","model":"m","choices":[{"delta":{"content":"x"}}]}`,
		`{"choices":[{"delta":{"content":"first"}}],"usage":null}`,
		`{"choices":[{"delta":{"content":"first"}}],"usage":null,"id":"z"}`,
		`{"choices":[{"delta":{"content":""}}],"usage":{"prompt_tokens":3,"completion_tokens":7}}`,
		head + `"choices":[{"delta":{"content":"broken"`,
		head + `"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}`,
		head + `"choices":[{"delta":{"content":"late"}}],"usage":null}`,
		`[DONE]`,
	}
	var seen chunkStart
	var shared, alone providers.Result
	for i, c := range chunks {
		ev := sse.Event{Data: []byte(c)}
		keepShared := chatStream(ev, &shared, false, &seen)
		keepAlone := chatStream(sse.Event{Data: []byte(c)}, &alone, false, nil)
		if keepShared != keepAlone || shared != alone {
			t.Fatalf("chunk %d %s: kept %v, %+v; read alone: kept %v, %+v", i, c, keepShared, shared.Usage, keepAlone, alone.Usage)
		}
	}
	if alone.Usage.OutputTokens != 9 || alone.Usage.InputTokens != 5 {
		t.Fatalf("usage %+v, want the last usage chunk's", alone.Usage)
	}
}
