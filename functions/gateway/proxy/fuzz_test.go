package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/limiter"
)

var fuzzRules = []limiter.Rule{
	{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1_000_000, MaxTokens: 50_000_000}},
	{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Gauge{MaxInFlight: 4}},
}

// checkAnswer holds every answer to what the invariants say: a known
// status, an error in the route's own shape, nothing left in flight, no
// counter out of its range, and the upstream called only for a success.
func checkAnswer(t *testing.T, f *fixture, path string, w *httptest.ResponseRecorder, calls int64) {
	t.Helper()
	code, body := w.Code, w.Body.String()
	switch code {
	case 200, 400, 404, 413, 415, 429:
	default:
		t.Fatalf("%s: status %d: %s", path, code, body)
	}
	if code != 200 {
		var e map[string]any
		if err := json.Unmarshal([]byte(body), &e); err != nil || e["error"] == nil {
			t.Fatalf("%s: %d answer is not an error object: %s", path, code, body)
		}
		// Only an answer the provider gave (after admission) may have
		// reached it; the gateway's own refusals never do.
		if f.upstream.calls.Load() != calls && w.Header().Get("X-Tollgate-Provider") == "" {
			t.Fatalf("%s: the gateway's %d reached the upstream", path, code)
		}
	}
	for _, st := range readAll(t, f) {
		if st.Cur < 0 || st.Prev < 0 {
			t.Fatalf("%s: a counter went negative: %+v", path, st)
		}
	}
	if fly := readAll(t, f)[2]; fly.Cur != 0 {
		t.Fatalf("%s: %d left in flight after the answer", path, fly.Cur)
	}
}

// readAll reads the fuzz rules' counters: requests, tokens, in flight.
func readAll(t *testing.T, f *fixture) []limiter.State {
	t.Helper()
	rs, _ := limiter.NewRules(fuzzRules)
	l, _ := limiter.New(limiter.Config{Store: f.store, Rules: rs})
	us, err := l.AllUsage(t.Context(), f.now)
	if err != nil {
		t.Fatal(err)
	}
	var out []limiter.State
	for _, u := range us {
		for _, d := range u.Dimensions {
			out = append(out, limiter.State{Cur: d.Used, Prev: d.Previous})
			if d.Used > d.Limit {
				t.Fatalf("%s holds %d, over its limit %d", u.Rule.Describe(), d.Used, d.Limit)
			}
		}
	}
	return out
}

// Any size a client may send, from the whole int64 range: a 400, or an
// admission whose reservation stays within the limits.
func FuzzAdmissionAmounts(f *testing.F) {
	f.Add(int64(16), int64(1), uint16(3))
	f.Add(int64(1<<63-1), int64(1<<63-1), uint16(500))
	f.Add(int64(-1<<63), int64(0), uint16(0))
	f.Add(int64(2147483647), int64(128), uint16(1000))
	fx := newFuzzFixture(f)
	f.Fuzz(func(t *testing.T, maxTokens, n int64, words uint16) {
		body := fmt.Sprintf(`{"model":"gpt-4o","messages":[{"role":"user","content":%q}],"max_tokens":%d,"n":%d}`,
			strings.Repeat("w ", int(words%2000)), maxTokens, n)
		calls := fx.upstream.calls.Load()
		w := fx.do("POST", "/v1/chat/completions", body, nil)
		checkAnswer(t, fx, "chat", w, calls)
	})
}

// Every route's parser, on any body: never a panic, never a 5xx, an error
// in the route's shape for what it cannot take.
func FuzzRouteBodies(f *testing.F) {
	routes := []string{
		"/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/messages",
		"/v1beta/models/gemini-2.5-flash:generateContent", "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
		"/v1/audio/speech", "/v1/batches",
	}
	for i := range routes {
		f.Add(uint8(i), `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
		f.Add(uint8(i), `{"model":"claude-sonnet-4","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)
		f.Add(uint8(i), `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":5,"candidateCount":2}}`)
		f.Add(uint8(i), `{"model":"gpt-4o","input":[{"content":[{"type":"input_text","text":"x"}]}],"max_output_tokens":3}`)
		f.Add(uint8(i), `{"model":"text-embedding-3-small","input":[[1,2,3],[4]]}`)
		f.Add(uint8(i), `{"input_file_id":"f","endpoint":"/v1/chat/completions"}`)
	}
	fx := newFuzzFixture(f)
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		path := routes[int(route)%len(routes)]
		calls := fx.upstream.calls.Load()
		w := fx.do("POST", path, body, nil)
		checkAnswer(t, fx, path, w, calls)
	})
}

func newFuzzFixture(f *testing.F) *fixture {
	fx := newFixtureTB(f, "", fuzzRules...)
	return fx
}

// The fast chat parser reads every body it takes exactly as the decoder
// does; what it does not take, the decoder judges.
func FuzzChatParse(f *testing.F) {
	f.Add(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"n":2,"stream":true}`)
	f.Add(`{"MODEL":"x","messages":[{"Content":"a","tool_calls":[{"id":"1"}]}],"tools":[{"type":"function"}]}`)
	f.Add(`{"model":"a\\u0062","messages":[{"content":[{"type":"text","text":"x"}]}],"max_tokens":1e3}`)
	f.Fuzz(func(t *testing.T, body string) {
		fast, ok := proxy.ParseChat([]byte(body))
		if !ok {
			return
		}
		slow, err := proxy.DecodeChat([]byte(body))
		if err != nil {
			t.Fatalf("%s: the fast parser took a body the decoder refuses: %v", body, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s:\\n fast %+v\\n slow %+v", body, fast, slow)
		}
	})
}
