package proxy_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers/jsonx"
)

// The gateway reads a body as the upstream will: member names exactly, and
// each member once. A member admission reads spelled otherwise but for
// case, or any member given twice, is a 400 in the route's shape, and
// nothing is sent upstream; Gemini's proto spellings are read as the API
// reads them.
func TestBodiesReadAsTheUpstreamReadsThem(t *testing.T) {
	f := newFixture(t, "")
	for _, c := range []struct {
		path, body, says string
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"MAX_TOKENS":1}`, `"MAX_TOKENS" is not "max_tokens"`},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"Max_Completion_Tokens":1}`, "case-sensitive"},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"N":1}`, `"N" is not "n"`},
		// The Kelvin sign folds to k, as encoding/json matches names, in
		// a name a byte longer than the one it folds to.
		{"/v1/chat/completions", "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_to\u212aens\":1}", "case-sensitive"},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"STREAM":false}`, "case-sensitive"},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5000,"max_tokens":1}`, `"max_tokens" is given twice`},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi","content":"x"}]}`, "messages[0].content"},
		// Names the decoder reads ignoring case, in a message and in a
		// content part: the upstream would send the long text, the
		// gateway count the empty one.
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"a long text","CONTENT":""}]}`, `"messages[0].CONTENT" is not "messages[0].content"`},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"text","text":"long","Text":""}]}]}`, `"messages[1].content[0].Text" is not "messages[1].content[0].text"`},
		{"/v1/responses", `{"model":"gpt-4o","input":"hi","Max_Output_Tokens":1}`, "case-sensitive"},
		{"/v1/messages", `{"model":"claude-sonnet-4","max_tokens":1,"MAX_TOKENS":9000,"messages":[{"role":"user","content":"hi"}]}`, "case-sensitive"},
		{"/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"MaxOutputTokens":1}}`, "generationConfig.maxOutputTokens"},
		{"/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":1,"max_output_tokens":9000}}`, "JSON and its proto name"},
		{"/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":1},"generation_config":{}}`, "JSON and its proto name"},
	} {
		calls := f.upstream.calls.Load()
		w := f.do("POST", c.path, c.body, nil)
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &e)
		if w.Code != 400 || !strings.Contains(e.Error.Message, c.says) {
			t.Errorf("%s %s: %d %s, want 400 saying %s", c.path, c.body, w.Code, w.Body, c.says)
		}
		if f.upstream.calls.Load() != calls {
			t.Errorf("%s %s reached the upstream", c.path, c.body)
		}
	}
	// Gemini's proto name is read: max_output_tokens caps the reservation.
	g := newFixture(t, "", limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: limiter.Minute, MaxOutputTokens: 100_000}})
	w := g.do("POST", "/v1beta/models/gemini-2.5-flash:generateContent",
		`{"contents":[{"parts":[{"text":"hi"}]}],"generation_config":{"max_output_tokens":7000,"candidate_count":2}}`, nil)
	if w.Code != 200 || w.Header().Get("X-Ratelimit-Remaining-Tokens") != "86000" {
		t.Fatalf("generation_config.max_output_tokens: %d, remaining %q, want 7,000 × 2 reserved of 100,000", w.Code, w.Header().Get("X-Ratelimit-Remaining-Tokens"))
	}
}

// reading is how a parser may read a chat body's output cap and count of
// completions.
type reading struct{ cap, n int64 }

// readings are the ways a parser may read a chat body: by exact names,
// the first or the last of a duplicate; ignoring case, the last
// (encoding/json). A reading that finds no cap asks what the gateway
// reserves for a body that sets none (the default, 1,024).
func readings(body []byte) []reading {
	var out []reading
	add := func(maxTokens, maxCompletion, n *int64) {
		c := maxCompletion
		if c == nil {
			c = maxTokens
		}
		if c == nil {
			none := int64(1024)
			c = &none
		}
		if *c <= 0 {
			return
		}
		count := int64(1)
		if n != nil && *n > 1 {
			count = *n
		}
		out = append(out, reading{*c, count})
	}
	for _, first := range []bool{true, false} {
		var mt, mc, n *int64
		_ = jsonx.Fields(body, func(k []byte, start, end int) bool {
			var name string
			if json.Unmarshal(k, &name) != nil {
				return true
			}
			v, err := strconv.ParseInt(string(body[start:end]), 10, 64)
			if err != nil {
				return true
			}
			for _, f := range []struct {
				name string
				to   **int64
			}{{"max_tokens", &mt}, {"max_completion_tokens", &mc}, {"n", &n}} {
				if name == f.name && (*f.to == nil || !first) {
					*f.to = &v
				}
			}
			return true
		})
		add(mt, mc, n)
	}
	var folded struct {
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		N                   *int64 `json:"n"`
	}
	if json.Unmarshal(body, &folded) == nil {
		add(folded.MaxTokens, folded.MaxCompletionTokens, folded.N)
	}
	return out
}

// Any chat body the gateway admits reserves at least what any reasonable
// reading of it asks (up to the model's maximum output): whatever the
// spelling, escapes and duplicates, there is no body the gateway reads as
// asking less than an upstream would produce.
func FuzzReservationCoversEveryReading(f *testing.F) {
	for _, b := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"MAX_TOKENS":1}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5000,"max_tokens":1}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"max_tokens":5000}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max\u005ftokens":3000,"n":2}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":4000,"max_tokens":1}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"N":8}`,
		"{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_to\u212aens\":1}",
	} {
		f.Add(b)
	}
	const limit = 1 << 40
	fx := newFixtureTB(f, "", limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", PerChild: true, Limit: limiter.Window{Period: limiter.Minute, MaxOutputTokens: limit}})
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, body string) {
		path := fmt.Sprintf("/f%d", seq.Add(1))
		w := fx.do("POST", "/v1/chat/completions", body, map[string]string{"X-Tollgate-User-Path": path})
		if w.Code != 200 {
			return
		}
		remaining, err := strconv.ParseInt(w.Header().Get("X-Ratelimit-Remaining-Tokens"), 10, 64)
		if err != nil {
			t.Fatalf("%s: admitted without a token header: %v", body, w.Header())
		}
		reserved := limit - remaining
		const modelMax = 16_384 // gpt-4o's maximum output, which caps any reservation
		for _, r := range readings([]byte(body)) {
			if want := limiter.SatMul(min(r.cap, modelMax), r.n); reserved < want {
				t.Fatalf("%s: reserved %d output tokens, but a reading asks %d × %d", body, reserved, r.cap, r.n)
			}
		}
	})
}
