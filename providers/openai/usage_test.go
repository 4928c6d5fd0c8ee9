package openai

import "testing"

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
