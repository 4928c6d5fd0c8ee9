package tests

import (
	"encoding/json"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/mock"
)

// needNodePackages skips (or, under make test, fails) a test whose npm
// packages are not installed.
func needNodePackages(t *testing.T, pkgs ...string) {
	t.Helper()
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join("node_modules", p)); err != nil {
			if os.Getenv(dynamotest.Require) != "" {
				t.Fatalf("tests/node_modules/%s is missing: make test installs it", p)
			}
			t.Skipf("the npm package %s is not installed (make test installs it)", p)
		}
	}
}

// The official Node clients of OpenAI, Anthropic and Google, through the
// gateway: OpenAI embeddings as the SDK asks for them (base64), Anthropic
// count_tokens, Gemini countTokens and embeddings, and a 429 that each
// client raises as its own rate-limit error (tests/node/sdks.mjs).
func TestNodeSDKs(t *testing.T) {
	needNodePackages(t, "openai", "@anthropic-ai/sdk", "@google/genai")
	rs, _ := limiter.NewRules([]limiter.Rule{{Scope: limiter.ScopeUserPath, Subject: "/limited", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1}, PerChild: true}})
	l, _ := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs})
	cat, _ := providers.NewCatalog([]providers.Provider{mock.New("mock", 0)}, nil, nil)
	h, err := proxy.New(proxy.Config{Limiter: l, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cmd := exec.Command("node", "node/sdks.mjs")
	cmd.Env = append(os.Environ(), "TOLLGATE_URL="+srv.URL)
	out, err := cmd.Output()
	var res struct {
		OK                     bool        `json:"ok"`
		Error                  string      `json:"error"`
		OpenAIEmbeddings       [][]float64 `json:"openai_embeddings"`
		OpenAIEmbeddingsFloat  []float64   `json:"openai_embeddings_float"`
		AnthropicCountTokens   int64       `json:"anthropic_count_tokens"`
		AnthropicMessageTokens int64       `json:"anthropic_message_tokens"`
		GeminiCountTokens      int64       `json:"gemini_count_tokens"`
		GeminiEmbeddings       [][]float64 `json:"gemini_embeddings"`
		GeminiText             string      `json:"gemini_text"`
		OpenAI429              struct {
			RateLimitError bool `json:"rate_limit_error"`
			Status         int
		} `json:"openai_429"`
		Anthropic429 struct {
			RateLimitError bool `json:"rate_limit_error"`
			Status         int
		} `json:"anthropic_429"`
		Gemini429 struct {
			APIError bool `json:"api_error"`
			Status   int
		} `json:"gemini_429"`
	}
	_ = json.Unmarshal(out, &res)
	if err != nil || !res.OK {
		t.Fatalf("node clients: %v %s", err, strings.TrimSpace(string(out)))
	}
	// base64 vectors decode to what the float form says, to float32
	// precision: not the zeros a float array read as base64 gives.
	if len(res.OpenAIEmbeddings) != 2 || len(res.OpenAIEmbeddings[0]) != len(res.OpenAIEmbeddingsFloat) {
		t.Fatalf("embeddings %v", res.OpenAIEmbeddings)
	}
	for i, v := range res.OpenAIEmbeddings[0] {
		if math.Abs(v-res.OpenAIEmbeddingsFloat[i]) > 1e-6 {
			t.Fatalf("base64 vector %v, float vector %v", res.OpenAIEmbeddings[0], res.OpenAIEmbeddingsFloat)
		}
	}
	if res.AnthropicCountTokens <= 0 || res.AnthropicMessageTokens <= 0 || res.GeminiCountTokens <= 0 ||
		len(res.GeminiEmbeddings) != 3 || res.GeminiText == "" {
		t.Fatalf("answers %s", out)
	}
	if !res.OpenAI429.RateLimitError || !res.Anthropic429.RateLimitError || !res.Gemini429.APIError || res.Gemini429.Status != 429 {
		t.Fatalf("429s not raised as each client's rate-limit error: %s", out)
	}
}
