package proxy_test

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// Token counting is charged nothing (the providers neither bill it nor
// count it against generations); Gemini's embeddings are charged their
// input, like OpenAI's.
func TestCountTokensAndGeminiEmbeddings(t *testing.T) {
	f := newFixture(t, "", limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 100, MaxTokens: 40}})
	hdr := map[string]string{"X-Tollgate-User-Path": "/team/app"}
	long := strings.Repeat("many words here ", 20) // well over the 40 tokens
	remaining := func(t *testing.T, w *httptest.ResponseRecorder) int64 {
		t.Helper()
		v := w.Header()["X-Ratelimit-Remaining-Tokens"]
		if len(v) != 1 {
			t.Fatalf("no token headers: %v", w.Header())
		}
		n, _ := strconv.ParseInt(v[0], 10, 64)
		return n
	}
	for _, c := range []struct{ path, body, field string }{
		{"/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"` + long + `"}]}`, "input_tokens"},
		{"/v1beta/models/gemini-2.5-flash:countTokens", `{"contents":[{"parts":[{"text":"` + long + `"}]}]}`, "totalTokens"},
		{"/v1/models/gemini-2.5-flash:countTokens", `{"generateContentRequest":{"contents":[{"parts":[{"text":"` + long + `"}]}]}}`, "totalTokens"},
	} {
		for range 3 {
			w := f.do("POST", c.path, c.body, hdr)
			if w.Code != 200 {
				t.Fatalf("%s: %d %s", c.path, w.Code, w.Body)
			}
			var out map[string]int64
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out[c.field] < 40 {
				t.Fatalf("%s: answer %s", c.path, w.Body)
			}
			if v := w.Header().Get("X-Ratelimit-Remaining-Requests"); v != "" {
				t.Fatalf("%s was admitted against the rules (remaining requests %s)", c.path, v)
			}
		}
	}
	if n := f.upstream.calls.Load(); n != 9 {
		t.Fatalf("%d calls reached the upstream, want 9", n)
	}

	w := f.do("POST", "/v1beta/models/text-embedding-004:embedContent", `{"content":{"parts":[{"text":"hello world"}]}}`, hdr)
	var one struct {
		Embedding struct{ Values []float64 } `json:"embedding"`
	}
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &one) != nil || len(one.Embedding.Values) == 0 {
		t.Fatalf("embedContent: %d %s", w.Code, w.Body)
	}
	if n := remaining(t, w); n >= 40 || n < 30 {
		t.Fatalf("embedContent should be charged its input only: %d of 40 left", n)
	}
	if v := w.Header().Get("X-Ratelimit-Remaining-Requests"); v != "99" {
		t.Fatalf("after nine token counts and one embedding, %s of 100 requests left; want 99 (the counts are free)", v)
	}
	w = f.do("POST", "/v1beta/models/text-embedding-004:batchEmbedContents",
		`{"requests":[{"content":{"parts":[{"text":"a"}]}},{"content":{"parts":[{"text":"b"}]}}]}`, hdr)
	var many struct {
		Embeddings []struct{ Values []float64 } `json:"embeddings"`
	}
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &many) != nil || len(many.Embeddings) != 2 {
		t.Fatalf("batchEmbedContents: %d %s", w.Code, w.Body)
	}
	w = f.do("POST", "/v1beta/models/text-embedding-004:embedContent", `{"content":{"parts":[{"text":"`+long+`"}]}}`, hdr)
	if w.Code != 429 {
		t.Fatalf("an embedding larger than the tokens left: %d %s", w.Code, w.Body)
	}
}

// An unknown route is 404 in the protocol its path implies.
func TestUnknownRouteInItsProtocol(t *testing.T) {
	f := newFixture(t, "")
	for path, check := range map[string]func(b []byte) bool{
		"/v2/nothing": func(b []byte) bool {
			var e openAIError
			return json.Unmarshal(b, &e) == nil && e.Error.Type == "invalid_request_error" && e.Error.Code != nil && *e.Error.Code == "unknown_url"
		},
		"/v1/messages/batches": func(b []byte) bool {
			var e struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			return json.Unmarshal(b, &e) == nil && e.Type == "error" && e.Error.Type == "not_found_error"
		},
		"/v1beta/models/gemini-2.5-flash:predictLongRunning": func(b []byte) bool {
			var e struct {
				Error struct {
					Code   int
					Status string
				}
			}
			return json.Unmarshal(b, &e) == nil && e.Error.Code == 404 && e.Error.Status == "NOT_FOUND"
		},
		"/v1beta/cachedContents": func(b []byte) bool {
			var e struct {
				Error struct{ Status string }
			}
			return json.Unmarshal(b, &e) == nil && e.Error.Status == "NOT_FOUND"
		},
	} {
		w := f.do("POST", path, `{}`, nil)
		if w.Code != 404 || !check(w.Body.Bytes()) {
			t.Errorf("%s: %d %s", path, w.Code, w.Body)
		}
	}
}

// The routes found before the mux are found for exactly what the mux
// would find them for: their method and their path unescaped; a slash
// escaped inside the path, another method or a longer path go to the
// mux's answers.
func TestBusyRoutesFoundAsTheMuxFindsThem(t *testing.T) {
	f := newFixture(t, "")
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/v1/chat/completions", 200},
		{"POST", "/v1/chat%2Fcompletions", 404},
		{"POST", "/v1/chat/completions/", 404},
		{"POST", "/v1/chat/completions/x", 404},
		{"GET", "/v1/chat/completions", 404},
		{"PUT", "/v1/messages", 404},
		{"POST", "/v1%2Fmessages", 404},
		{"GET", "/v1/responses", 404},
	} {
		if w := f.do(c.method, c.path, body, nil); w.Code != c.want {
			t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, w.Code, c.want, w.Body)
		}
	}
}
