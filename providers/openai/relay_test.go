package openai

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/sse"
)

// sink is a ResponseWriter that keeps what it is sent.
type sink struct {
	h   http.Header
	out bytes.Buffer
}

func (s *sink) Header() http.Header         { return s.h }
func (*sink) WriteHeader(int)               {}
func (s *sink) Write(p []byte) (int, error) { return s.out.Write(p) }
func (*sink) Flush()                        {}

// pieces reads its stream in reads of the sizes given, in turn.
type pieces struct {
	b     []byte
	sizes []int
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := len(p.b)
	if len(p.sizes) > 0 {
		n = max(min(n, p.sizes[0]), 1)
		p.sizes = p.sizes[1:]
	}
	n = copy(b, p.b[:n])
	p.b = p.b[n:]
	return n, nil
}
func (*pieces) Close() error { return nil }

// chatRelay relays stream as a chat stream is relayed, with the runs of
// plain chunks passed on whole (run) or every event read (not run), and
// returns what the client got and the result.
func chatRelay(stream string, sizes []int, wantsUsage, run bool) (string, providers.Result) {
	w := &sink{h: http.Header{}}
	res := relayTo(w, []byte(stream), sizes, wantsUsage, run)
	return w.out.String(), res
}

func relayTo(w http.ResponseWriter, stream []byte, sizes []int, wantsUsage, run bool) providers.Result {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: &pieces{b: stream, sizes: sizes}}
	var seen chunkStart
	sight := &streamSight{keep: func(ev sse.Event, res *providers.Result) bool {
		return chatStream(ev, res, wantsUsage, &seen)
	}}
	if run {
		sight.run = func(b []byte, res *providers.Result) int { return plainChunks(b, res, &seen) }
	}
	res, _ := relay(w, resp, providers.Result{}, sight)
	return res
}

// A relay that passes runs of plain chunks on as they arrived sends the
// client the bytes, and counts the output and usage, of one that reads
// every event: for streams of the recorded chunks and of every other
// shape (comments, stray blank lines, CRLF, names, tool calls, refusals,
// spaced members, chunks without "usage":null, the usage chunk hidden or
// not), however they are cut into reads.
func TestPlainChunksAsEventByEvent(t *testing.T) {
	recorded, err := os.ReadFile("../../tests/fixtures/openai_chat_stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, e := range strings.SplitAfter(string(recorded), "\n\n") {
		if e != "" {
			events = append(events, e)
		}
	}
	const chunk = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":%s}],"usage":null}`
	other := []string{
		"data: " + strings.Replace(chunk, "%s", `{"content":"Hi"}`, 1) + "\r\n\r\n",
		": keep-alive\n\n", "\n\n", "\n",
		"event: x\ndata: " + strings.Replace(chunk, "%s", `{"content":"named"}`, 1) + "\n\n",
		"data: " + strings.Replace(chunk, "%s", `{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}`, 1) + "\n\n",
		"data: " + strings.Replace(chunk, "%s", `{"refusal":"no"}`, 1) + "\n\n",
		"data: " + strings.Replace(chunk, "%s", `{"content": "spaced"}`, 1) + "\n\n",
		"data: " + strings.Replace(chunk, "%s", `{"content":""}`, 1) + "\n\n",
		`data: {"id":"c","choices":[{"index":0,"delta":{"content":"no usage member"}}]}` + "\n\n",
		"data:" + strings.Replace(chunk, "%s", `{"content":"no space"}`, 1) + "\n\n",
		"id: 7\n\n", "data: [DONE]\n\n", "data: [DONE]\r\n\n",
		"data: " + strings.Replace(chunk, "%s", `{"content":"two"}`, 1) + "\ndata: \n\n",
		`data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}` + "\n\n",
		"data: " + strings.Replace(chunk, "%s", `{"content":"cut`, 1),
	}
	r := rand.New(rand.NewPCG(11, 12))
	for i := range 3000 {
		var b strings.Builder
		for range 1 + r.IntN(14) {
			if r.IntN(3) == 0 {
				b.WriteString(other[r.IntN(len(other))])
			} else {
				b.WriteString(events[r.IntN(len(events))])
			}
		}
		stream := b.String()
		if i == 0 {
			stream = string(recorded)
		}
		sizes := make([]int, r.IntN(6))
		for k := range sizes {
			sizes[k] = 1 + r.IntN(400)
		}
		wants := r.IntN(2) == 0
		gotOut, gotRes := chatRelay(stream, sizes, wants, true)
		wantOut, wantRes := chatRelay(stream, sizes, wants, false)
		if gotOut != wantOut || gotRes != wantRes {
			t.Fatalf("stream %q (reads %v, usage asked %v):\n runs passed on whole: %q %+v\n event by event: %q %+v",
				stream, sizes, wants, gotOut, gotRes.Usage, wantOut, wantRes.Usage)
		}
	}
}

// BenchmarkChatStreamRelay relays a recorded chat stream (11 events,
// arrived in one read) as the gateway does: the runs of plain chunks
// passed on as they arrived, the others read event by event (and, for
// comparison, every event read).
func BenchmarkChatStreamRelay(b *testing.B) {
	stream, err := os.ReadFile("../../tests/fixtures/openai_chat_stream.sse")
	if err != nil {
		b.Fatal(err)
	}
	for _, run := range []bool{true, false} {
		name := map[bool]string{true: "runs", false: "events"}[run]
		b.Run(name, func(b *testing.B) {
			w := &sink{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				w.out.Reset()
				if res := relayTo(w, stream, nil, false, run); res.Usage.OutputTokens != 8 {
					b.Fatalf("usage %+v", res.Usage)
				}
			}
		})
	}
}

// atOnce gives its whole stream in one read, with io.EOF: as net/http
// gives the end of a body whose last chunk arrived with the rest.
type atOnce struct{ b []byte }

func (a *atOnce) Read(p []byte) (int, error) {
	n := copy(p, a.b)
	a.b = a.b[n:]
	if len(a.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}
func (*atOnce) Close() error { return nil }

// gone is a client that has left: every write fails.
type gone struct{ h http.Header }

func (g gone) Header() http.Header     { return g.h }
func (gone) WriteHeader(int)           {}
func (gone) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
func (gone) Flush()                    {}

// A stream whose events the client never got (its writes failed) reports
// its usage as inexact, when the stream's last bytes came with its end
// and were written only then, read as runs or event by event.
func TestRelayToAClientGoneReportsInexactUsage(t *testing.T) {
	stream, err := os.ReadFile("../../tests/fixtures/openai_chat_stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []bool{true, false} {
		for _, wants := range []bool{true, false} { // every event relayed, or the usage chunk kept from the client
			resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: &atOnce{b: stream}}
			var seen chunkStart
			sight := &streamSight{keep: func(ev sse.Event, res *providers.Result) bool { return chatStream(ev, res, wants, &seen) }}
			if run {
				sight.run = func(b []byte, res *providers.Result) int { return plainChunks(b, res, &seen) }
			}
			res, _ := relay(gone{http.Header{}}, resp, providers.Result{}, sight)
			if res.Usage.Reported {
				t.Errorf("runs %v, usage asked %v: usage %+v reported exact to a client that got none of it", run, wants, res.Usage)
			}
		}
	}
}
