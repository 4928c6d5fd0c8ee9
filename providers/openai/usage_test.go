package openai

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
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
	// A start that fits the kept array, and one that does not.
	for _, head := range []string{
		`{"id":"c1","object":"chat.completion.chunk","model":"m",`,
		`{"id":"c1","object":"chat.completion.chunk","model":"m","system_fingerprint":"` + strings.Repeat("f", 300) + `",`,
	} {
		readsEachChunkAsAlone(t, head)
	}
}

func readsEachChunkAsAlone(t *testing.T, head string) {
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
		if i == 1 || i == 10 {
			// What the chunk before kept is taken as it shares it.
			if at := seen.in(ev.Data); at != len(head) {
				t.Fatalf("chunk %d: read from %d, want %d, after the shared start", i, at, len(head))
			}
		}
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

// A chunk with text and "usage":null counts as the scan of its members
// counts it, and one that is otherwise is left to that scan: for every
// chunk of the recorded streams and chunks of other shapes.
func TestOutputWithoutUsageAsTheScan(t *testing.T) {
	chunks := []string{
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null}}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":null,"tool_calls":[{"index":0,"function":{"arguments":"{\"content\":\"x"}}]}}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"refusal":"no"}}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{},"logprobs":{"content":[{"token":"\"content\":\"y"}]},"finish_reason":"stop"}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"\"quoted\""}}],"usage":null}`,
		`{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"no usage member"}}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"spaced"}}], "usage": null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content": "spaced"}}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":""}},{"index":1,"delta":{"content":"second"}}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":null,"refusal":""}},{"index":1,"delta":{"refusal":"no"}}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[]}}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"x"}]}}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}],"usage":null}`,
	}
	for _, name := range []string{"openai_chat_stream.sse"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "tests", "fixtures", name))
		if err != nil {
			t.Fatal(err)
		}
		rd := sse.NewReader(bytes.NewReader(b))
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			chunks = append(chunks, string(ev.Data))
		}
		rd.Close()
	}
	for _, reported := range []bool{false, true} {
		for _, c := range chunks {
			data := []byte(c)
			var scan providers.Result
			scan.Usage.Reported = reported
			chatStreamScan(sse.Event{Data: data}, &scan, false, nil)
			// After the members the chunk shares with the stream's
			// first (as chatStream looks), and from its start.
			for _, from := range []int{bytes.Index(data, []byte(`"choices"`)), 0} {
				if from < 0 {
					continue
				}
				output, known := outputWithoutUsage(data[from:])
				if !known {
					continue
				}
				fast := providers.Result{}
				fast.Usage.Reported = reported
				if output && !reported {
					fast.Usage.OutputTokens++
				}
				if fast != scan {
					t.Errorf("%s (reported %v, from %d): output %v, the scan: %+v", c, reported, from, output, scan.Usage)
				}
			}
		}
	}
	// And a stream read chunk by chunk counts what the scan of each
	// counts.
	var seen chunkStart
	var fast, scan providers.Result
	for _, c := range chunks {
		keepFast := chatStream(sse.Event{Data: []byte(c)}, &fast, false, &seen)
		keepScan := chatStreamScan(sse.Event{Data: []byte(c)}, &scan, false, nil)
		if keepFast != keepScan || fast != scan {
			t.Fatalf("%s: kept %v, %+v; the scan: kept %v, %+v", c, keepFast, fast.Usage, keepScan, scan.Usage)
		}
	}
}

// An answer passed through is read for its usage only when its start
// kept is a whole object: cut after an element's usage, it has none.
func TestHeadUsageOfACutAnswer(t *testing.T) {
	whole := `{"object":"list","data":[{"id":"a"},{"id":"b","usage":{"prompt_tokens":1}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`
	if u, ok := headUsage([]byte(whole)); !ok || u.InputTokens != 5 {
		t.Fatalf("whole answer: %+v %v", u, ok)
	}
	cut := whole[:strings.Index(whole, `}}]`)+2]
	if u, ok := headUsage([]byte(cut)); ok {
		t.Fatalf("an answer cut at %q read as using %+v", cut[len(cut)-20:], u)
	}
}

// indexName finds what bytes.Index finds, in bytes made of the name's
// own letters and quotes, where near misses abound.
func TestIndexNameIsIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, name := range [][]byte{contentName, refusalName, toolCallsName} {
		alphabet := string(name) + `:{}`
		for range 20000 {
			b := make([]byte, r.IntN(3*len(name)))
			for i := range b {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
			if r.IntN(4) == 0 {
				at := r.IntN(len(b) + 1)
				b = append(b[:at], append(append([]byte{}, name...), b[at:]...)...)
			}
			if got, want := indexName(b, name), bytes.Index(b, name); got != want {
				t.Fatalf("indexName(%q, %q) = %d, want %d", b, name, got, want)
			}
		}
	}
}
