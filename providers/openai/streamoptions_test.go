package openai

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/providers"
)

// A streamed chat asks the upstream for the usage chunk whatever the
// client sent as stream_options, keeps the client's other options byte
// for byte, and passes the usage chunk on only to a client that asked
// for it: as the last stream_options a decoder keeps says.
func TestStreamOptionsAsTheClientSentThem(t *testing.T) {
	recorded, err := os.ReadFile("../../tests/fixtures/openai_chat_stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	var sent []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(recorded)
	}))
	defer up.Close()
	p, err := New(Config{Name: "openai", BaseURL: up.URL + "/v1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		name, options string // the members after "stream":true
		wantSent      string // the stream_options the upstream reads
		wantsUsage    bool
	}{
		{"none", ``, `{"include_usage":true}`, false},
		{"usage asked", `,"stream_options":{"include_usage":true}`, `{"include_usage":true}`, true},
		{"usage refused, another option kept", `,"stream_options":{ "include_usage" : false, "x":[1] }`, `{ "include_usage" : true, "x":[1] }`, false},
		{"other options only", `,"stream_options":{"x":1}`, `{"x":1,"include_usage":true}`, false},
		{"null", `,"stream_options":null`, `{"include_usage":true}`, false},
		{"not an object", `,"stream_options":"yes"`, `{"include_usage":true}`, false},
		{"twice, the last asks", `,"stream_options":{"include_usage":false},"stream_options":{"include_usage":true}`, `{"include_usage":true}`, true},
		{"twice, the last does not ask", `,"stream_options":{"include_usage":true},"stream_options":{}`, `{"include_usage":true}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := `{"model":"gpt-4o","stream":true` + c.options + `,` + msgs + `}`
			w := httptest.NewRecorder()
			res, err := p.Serve(context.Background(), w, &providers.Request{Op: providers.OpChat, Model: "gpt-4o", Stream: true, Body: []byte(body)})
			if err != nil {
				t.Fatal(err)
			}
			var last struct {
				StreamOptions json.RawMessage `json:"stream_options"`
			}
			if err := json.Unmarshal(sent, &last); err != nil {
				t.Fatalf("the upstream got %s: %v", sent, err)
			}
			if string(last.StreamOptions) != c.wantSent {
				t.Errorf("the upstream read stream_options %s, want %s (body %s)", last.StreamOptions, c.wantSent, sent)
			}
			if n := strings.Count(string(sent), `"stream_options"`); n != max(1, strings.Count(c.options, `"stream_options"`)) {
				t.Errorf("stream_options %d times in %s", n, sent)
			}
			if !res.Usage.Reported || res.Usage.OutputTokens == 0 {
				t.Errorf("usage %+v, want the upstream's", res.Usage)
			}
			if got := strings.Contains(w.Body.String(), `"usage":{`); got != c.wantsUsage {
				t.Errorf("usage chunk passed on: %v, want %v", got, c.wantsUsage)
			}
		})
	}
}
