package proxy_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

func tokenRule(limit int64) limiter.Rule {
	return limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: time.Minute, MaxTokens: limit}}
}

func remainingTokens(t *testing.T, f *fixture, body string) (int, int64) {
	t.Helper()
	w := f.do("POST", "/v1/chat/completions", body, nil)
	rem, _ := strconv.ParseInt(w.Header().Get("X-Ratelimit-Remaining-Tokens"), 10, 64)
	return w.Code, rem
}

// The defect of old: max_tokens of 2^63−1 with a prompt larger than what
// was left wrapped the reservation's sum negative, the request was
// admitted, the counter went hugely negative and the rule admitted all
// after it. Now the size is refused as what it is, and the rule holds.
func TestAbsurdMaxTokensCannotDisableARule(t *testing.T) {
	f := newFixture(t, "", tokenRule(500))
	prompt := strings.Repeat("word ", 600) // 600 tokens: more than the rule allows
	for _, v := range []string{"9223372036854775807", "2147483648", "-9223372036854775808", "1e30", "12.5"} {
		body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":` + v + `}`
		w := f.do("POST", "/v1/chat/completions", body, nil)
		if w.Code != 400 || decodeError(t, w).Error.Param == nil || *decodeError(t, w).Error.Param != "max_tokens" {
			t.Fatalf("max_tokens %s: status %d %s, want 400 naming max_tokens", v, w.Code, w.Body)
		}
	}
	admitted := 0
	for range 100 {
		if code, _ := remainingTokens(t, f, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":90}`); code == 200 {
			admitted++
		}
	}
	// Each asks about 100 tokens (8 of prompt, 90 reserved): five fit.
	if admitted != 5 {
		t.Fatalf("%d of 100 admitted against a 500-token limit, want 5", admitted)
	}
	if f.upstream.calls.Load() != 5 {
		t.Fatalf("upstream called %d times", f.upstream.calls.Load())
	}
}

// The largest max_tokens a client may send is accepted, and reserves no
// more than the model can produce (gpt-4o: 16,384), or than the gateway's
// maximum for a model it does not know (128,000).
func TestReservationCappedAtModelMaximum(t *testing.T) {
	for _, tc := range []struct {
		model string
		cap   int64
	}{{"gpt-4o", 16_384}, {"some-model", 128_000}} {
		f := newFixture(t, "", tokenRule(1_000_000))
		code, rem := remainingTokens(t, f, `{"model":"`+tc.model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2147483647}`)
		if code != 200 {
			t.Fatalf("%s: status %d", tc.model, code)
		}
		if used := 1_000_000 - rem; used < tc.cap || used > tc.cap+20 {
			t.Fatalf("%s: reserved %d tokens, want the cap %d and the prompt", tc.model, used, tc.cap)
		}
	}
}

// n multiplies the output reservation; outside 1..128 it is a 400.
func TestChoicesMultiplyTheReservation(t *testing.T) {
	f := newFixture(t, "", tokenRule(1_000_000))
	_, one := remainingTokens(t, f, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":1000}`)
	_, fifty := remainingTokens(t, f, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":1000,"n":50}`)
	if got := one - fifty; got < 50*1000 || got > 50*1000+20 {
		t.Fatalf("n=50 reserved %d tokens, want 50 × 1000 and the prompt", got)
	}
	for _, n := range []string{"0", "-1", "129", "9223372036854775807"} {
		w := f.do("POST", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"n":`+n+`}`, nil)
		if w.Code != 400 || !strings.Contains(w.Body.String(), "n must be an integer from 1 to 128") {
			t.Fatalf("n=%s: status %d %s", n, w.Code, w.Body)
		}
	}
}

// The other protocols' sizes are bounded the same way, in their shapes.
func TestSizesBoundedOnEveryProtocol(t *testing.T) {
	f := newFixture(t, "")
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/messages", `{"model":"claude-sonnet-4","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"hi"}]}`,
			`"type":"invalid_request_error"`},
		{"/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"candidateCount":9}}`,
			`"status":"INVALID_ARGUMENT"`},
		{"/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":4294967296}}`,
			`"status":"INVALID_ARGUMENT"`},
		{"/v1/responses", `{"model":"gpt-4o","input":"hi","max_output_tokens":-5}`, `"param":"max_output_tokens"`},
	} {
		w := f.do("POST", tc.path, tc.body, nil)
		if w.Code != 400 || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%s: status %d %s, want 400 with %s", tc.path, w.Code, w.Body, tc.want)
		}
	}
	if f.upstream.calls.Load() != 0 {
		t.Fatal("an absurd size reached the upstream")
	}
}

// The limiter itself refuses what no caller should send, whatever the
// route validated.
func TestLimiterRefusesOutOfRangeAmounts(t *testing.T) {
	rs, _ := limiter.NewRules([]limiter.Rule{tokenRule(1000)})
	l, _ := limiter.New(limiter.Config{Store: newFixture(t, "").store, Rules: rs})
	for _, v := range [][2]int64{{-1, 0}, {0, -1}, {limiter.MaxAmount + 1, 0}, {1<<63 - 1, 1<<63 - 1}} {
		_, err := l.Admit(t.Context(), t0, limiter.Request{ID: "x", Subject: limiter.Subject{UserPath: "/"}, InputTokens: v[0], OutputTokens: v[1]})
		if err == nil {
			t.Fatalf("amounts %v admitted or refused, want ErrInvalidAmount", v)
		}
	}
}
