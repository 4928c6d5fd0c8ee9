package openai

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/sse"
)

type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header       { return d.h }
func (discardWriter) WriteHeader(int)             {}
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) Flush()                      {}

// BenchmarkChatStreamRelay relays a recorded chat stream (11 events,
// arrived in one read) as the gateway does: each chunk looked at for its
// usage and output, passed on.
func BenchmarkChatStreamRelay(b *testing.B) {
	stream, err := os.ReadFile("../../tests/fixtures/openai_chat_stream.sse")
	if err != nil {
		b.Fatal(err)
	}
	w := discardWriter{http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(stream))}
		var seen chunkStart
		res, _ := relay(w, resp, providers.Result{}, func(ev sse.Event, res *providers.Result) bool {
			return chatStream(ev, res, false, &seen)
		})
		if res.Usage.OutputTokens != 8 {
			b.Fatalf("usage %+v", res.Usage)
		}
	}
}
