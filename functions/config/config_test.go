package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

func load(t *testing.T, env Env) (*Config, error) {
	t.Helper()
	if env == nil {
		env = Env{}
	}
	return Load(env)
}

func TestGoodFile(t *testing.T) {
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/good.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Rules) != 9 {
		t.Fatalf("%d rules, want 9: %+v", len(cfg.Rules), cfg.Rules)
	}
	minute := func(w limiter.Window) limiter.Window { w.Period = limiter.Minute; return w }
	want := map[limiter.RuleKey]limiter.Rule{
		"user_path:/team/alpha:60":    {Limit: minute(limiter.Window{MaxRequests: 100, MaxTokens: 50000})},
		"user_path:/team/alpha:c":     {Limit: limiter.Gauge{MaxInFlight: 10}},
		"user_path:/customers:60":     {Limit: minute(limiter.Window{MaxRequests: 100}), PerChild: true},
		"user_path:/batch:300":        {Limit: limiter.Window{Period: 300 * time.Second, MaxRequests: 50}},
		"provider:openai:c":           {Limit: limiter.Gauge{MaxInFlight: 50}},
		"model:openai/gpt-4o:60":      {Limit: minute(limiter.Window{MaxTokens: 90000})},
		"model:claude-sonnet-4:60":    {Limit: minute(limiter.Window{MaxInputTokens: 40000, MaxOutputTokens: 8000})},
		"user_path:/team/alpha:86400": {Limit: limiter.Window{Period: limiter.Day, MaxRequests: 10000}},
		"provider:openai:60":          {Limit: minute(limiter.Window{MaxRequests: 500})},
	}
	for _, r := range cfg.Rules {
		w, ok := want[r.Key()]
		if !ok {
			t.Errorf("unexpected rule %s", r.Key())
			continue
		}
		if r.Source != limiter.SourceConfig || r.Limit != w.Limit || r.PerChild != w.PerChild {
			t.Errorf("rule %s = %+v, want limits %+v from config", r.Key(), r, w)
		}
	}
	if cfg.Gateway.DefaultMaxTokens != 1024 || cfg.Gateway.MaxBodyBytes != 1<<20 || cfg.Gateway.LeaseTTL != 10*time.Minute {
		t.Errorf("gateway %+v", cfg.Gateway)
	}
}

func TestBadFiles(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"unknown_key.yaml", []string{`testdata/unknown_key.yaml:6: unknown key "max_request"`}},
		{"negative_limit.yaml", []string{"testdata/negative_limit.yaml:5: rate_limits.user_paths[0].limits[0]: max_requests: negative limit -5"}},
		{"unknown_period.yaml", []string{"testdata/unknown_period.yaml:5: rate_limits.providers[0].limits[0]: unknown period \"fortnight\""}},
		{"duplicate_rule.yaml", []string{"duplicate of rule 0 (same scope, subject and period)"}},
		{"per_child_provider.yaml", []string{"rate_limits.providers[0].limits[0]: per_child: only user_path rules can be per child"}},
		{"bad_path.yaml", []string{"rate_limits.user_paths[0].limits[0]: user_path: user path \"/team/../admin\" has a \"..\" segment"}},
		{"no_limits.yaml", []string{"rate_limits.user_paths[0].limits[0]: no limit set"}},
		// Unknown keys hide nothing: every other problem is listed with them.
		{"unknown_and_more.yaml", []string{
			`unknown_and_more.yaml:4: unknown key "bogus"`,
			`unknown_and_more.yaml:6: unknown key "whatever"`,
			`unknown_and_more.yaml:9: unknown key "nope"`,
			`unknown_and_more.yaml:6: rate_limits.user_paths[0].limits[0]: user_path: user path "team" does not start with '/'`,
			`unknown_and_more.yaml:6: rate_limits.user_paths[0].limits[0]: max_requests: negative limit -1`,
			`unknown_and_more.yaml:8: gateway.lease_ttl: "soon" is not a duration`,
		}},
		{"many_errors.yaml", []string{
			"many_errors.yaml:5: rate_limits.user_paths[0].limits[0]: user_path: user path \"team\" does not start with '/'",
			"many_errors.yaml:9: rate_limits.user_paths[1].limits[0]: no limit set",
			"many_errors.yaml:13: rate_limits.models[0].limits[0]: max_tokens: a concurrent rule limits requests in flight, not tokens",
			"many_errors.yaml:16: gateway.lease_ttl: \"soon\" is not a duration",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			_, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/" + tc.file})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestEmptyAndMissingFile(t *testing.T) {
	if _, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/empty.yaml"}); err != nil {
		t.Fatalf("empty file: %v", err)
	}
	if _, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/nope.yaml"}); err == nil || !strings.Contains(err.Error(), "TOLLGATE_CONFIG") {
		t.Fatalf("a missing file named by TOLLGATE_CONFIG must fail, got %v", err)
	}
	cfg, err := load(t, Env{}) // tollgate.yaml does not exist here: fine
	if err != nil || cfg.File != "" {
		t.Fatalf("no file: %v %q", err, cfg.File)
	}
}

func TestEnvRules(t *testing.T) {
	cfg, err := load(t, Env{
		"SET_RATE_LIMIT_TEAM__ALPHA":        "rpm=100,tpm=50000,rpd=10000,concurrent=10",
		"SET_RATE_LIMIT_":                   "rpm=1000",
		"SET_RATE_LIMIT_DATA_SCIENCE":       "rph=5",
		"SET_PROVIDER_RATE_LIMIT_OPENAI_EU": "rpm=500,concurrent=50",
		"SET_RATE_LIMIT_CUSTOMERS":          `[{"period":"minute","max_requests":100,"per_child":true}]`,
		"SET_RATE_LIMIT_BATCH":              `[{"period_seconds":300,"max_requests":50}]`,
		"UNRELATED":                         "x",
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[limiter.RuleKey]limiter.Rule{}
	for _, r := range cfg.Rules {
		got[r.Key()] = r
	}
	checks := []struct {
		key          limiter.RuleKey
		req, tok     int64
		perChild     bool
		wantPresence bool
	}{
		{"user_path:/team/alpha:60", 100, 50000, false, true},
		{"user_path:/team/alpha:86400", 10000, 0, false, true},
		{"user_path:/team/alpha:c", 10, 0, false, true},
		{"user_path:/:60", 1000, 0, false, true},
		{"user_path:/data-science:3600", 5, 0, false, true},
		{"provider:openai-eu:60", 500, 0, false, true},
		{"provider:openai-eu:c", 50, 0, false, true},
		{"user_path:/customers:60", 100, 0, true, true},
		{"user_path:/batch:300", 50, 0, false, true},
	}
	for _, c := range checks {
		r, ok := got[c.key]
		if !ok {
			t.Errorf("missing rule %s (have %v)", c.key, keys(got))
			continue
		}
		if req, tok := maxima(r); req != c.req || tok != c.tok || r.PerChild != c.perChild || r.Source != limiter.SourceConfig {
			t.Errorf("rule %s = %+v", c.key, r)
		}
	}
	if len(got) != len(checks) {
		t.Errorf("%d rules, want %d: %v", len(got), len(checks), keys(got))
	}
}

func keys(m map[limiter.RuleKey]limiter.Rule) []limiter.RuleKey {
	var out []limiter.RuleKey
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestBadEnv(t *testing.T) {
	_, err := load(t, Env{
		"SET_RATE_LIMIT_A":            "rpm=ten",
		"SET_RATE_LIMIT_B":            "rpw=5",
		"SET_RATE_LIMIT_C":            "rpm=-1",
		"SET_RATE_LIMIT_D":            `[{"period":"minute","max_requets":5}]`,
		"SET_PROVIDER_RATE_LIMIT_X":   `[{"period":"minute","max_requests":5,"per_child":true}]`,
		"SET_PROVIDER_RATE_LIMIT_":    "rpm=1",
		"SET_RATE_LIMIT_E":            "",
		"SET_RATE_LIMIT_F":            "rpm=1,rpm=2",
		"PORT":                        "eighty",
		"TOLLGATE_STORE":              "redis",
		"TOLLGATE_RECONCILE_INTERVAL": "5",
	})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{
		`SET_RATE_LIMIT_A: rpm: "ten" is not a whole number`,
		`SET_RATE_LIMIT_B: "rpw=5": unknown key "rpw"`,
		`SET_RATE_LIMIT_C: rpm: negative limit -1`,
		`SET_RATE_LIMIT_D: JSON: json: unknown field "max_requets"`,
		`SET_PROVIDER_RATE_LIMIT_X: [0]: per_child: only user_path rules can be per child`,
		`SET_PROVIDER_RATE_LIMIT_: no provider name`,
		`SET_RATE_LIMIT_E: empty value`,
		`SET_RATE_LIMIT_F: "rpm=2": rpm given twice`,
		`PORT: "eighty" is not a port number`,
		`TOLLGATE_STORE: "redis" is neither memory nor dynamodb`,
		`TOLLGATE_RECONCILE_INTERVAL: "5" is not a positive Go duration`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
}

func TestDuplicateAcrossSources(t *testing.T) {
	_, err := load(t, Env{
		"TOLLGATE_CONFIG":            "testdata/good.yaml",
		"SET_RATE_LIMIT_TEAM__ALPHA": "rpm=5",
	})
	if err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("a rule in both the file and the environment must be refused, got %v", err)
	}
}

func TestProviders(t *testing.T) {
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/providers.yaml", "OPENAI_API_KEY": "sk-o", "VLLM_BASE_URL": "http://127.0.0.1:9/v1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Providers) != 3 || len(cfg.Aliases) != 1 {
		t.Fatalf("providers %+v aliases %+v", cfg.Providers, cfg.Aliases)
	}
	o, az, v := cfg.Providers[0], cfg.Providers[1], cfg.Providers[2]
	if o.APIKey != "sk-o" || o.BaseURL != "https://api.openai.com/v1" {
		t.Errorf("openai %+v", o)
	}
	if az.APIKeyParameter != "/tollgate/azure" || az.APIKey != "" || az.Deployments["gpt-4o"] != "prod" {
		t.Errorf("azure %+v", az)
	}
	if v.BaseURL != "http://127.0.0.1:9/v1" || v.Timeout != 10*time.Minute {
		t.Errorf("vllm %+v: VLLM_BASE_URL must override", v)
	}
	if a := cfg.Aliases[0]; a.Strategy != "weighted" || a.Targets[0].Weight != 3 || a.Targets[1].Model != "vllm/meta-llama/Llama-3.1-8B-Instruct" {
		t.Errorf("alias %+v", a)
	}
}

func TestProvidersFromEnvOnly(t *testing.T) {
	cfg, err := load(t, Env{"ANTHROPIC_API_KEY": "sk-a", "GEMINI_API_KEY": "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Providers) != 2 || cfg.Providers[0].Name != "anthropic" || cfg.Providers[1].APIKey != "g" {
		t.Fatalf("providers %+v", cfg.Providers)
	}
	cfg, _ = load(t, Env{})
	if len(cfg.Providers) != 1 || cfg.Providers[0].Type != "mock" {
		t.Fatalf("with no keys, the mock: %+v", cfg.Providers)
	}
}

func TestBadProviders(t *testing.T) {
	_, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/bad_providers.yaml"})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{
		`providers[0]: type "openai-ish" is not one of`,
		`providers[2]: provider "DUP" is defined twice`,
		`providers[3]: give the key by one of`,
		`providers[4]: api_version and deployments are for azure providers`,
		`models[0]: strategy "random" is neither failover nor weighted`,
		`models[0].targets[0]: "gpt-4o" is not provider/model`,
		`provider "az": base_url is required for type azure`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

func TestEmptyConfigVariableMeansNoFile(t *testing.T) {
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": ""})
	if err != nil || cfg.File != "" {
		t.Fatalf("TOLLGATE_CONFIG= must mean no file: %v %q", err, cfg.File)
	}
}

func TestPolicyFile(t *testing.T) {
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/policy.yaml", "SET_BUDGET_TEAM__ALPHA": "usd=2.50/day, usd=40/month"})
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[limiter.RuleKey]limiter.Rule{}
	for _, r := range cfg.Rules {
		byKey[r.Key()] = r
	}
	for key, check := range map[limiter.RuleKey]func(r limiter.Rule) bool{
		"user_path:/vip:60":   func(r limiter.Rule) bool { return r.Priority == 1 && windowOf(r).MaxRequests == 100 },
		"user_path:/vip:3600": func(r limiter.Rule) bool { return r.Always && windowOf(r).Fixed },
		"user_path:/vip:b": func(r limiter.Rule) bool {
			b, ok := r.Limit.(limiter.Bucket)
			return ok && b.Capacity == 50 && b.RefillPerSecond == 2.5
		},
		"tag:feature=*:60":           func(r limiter.Rule) bool { return r.PerChild && windowOf(r).MaxRequests == 20 },
		"tag:env:60":                 func(r limiter.Rule) bool { return !r.PerChild && windowOf(r).MaxRequests == 200 },
		"tag:env=prod:60":            func(r limiter.Rule) bool { return windowOf(r).MaxTokens == 90000 },
		"key:*:60":                   func(r limiter.Rule) bool { return r.PerChild },
		"key:key_0123456789abcdef:c": func(r limiter.Rule) bool { return r.Limit == limiter.Gauge{MaxInFlight: 2} },
		"user_path:/team:$day": func(r limiter.Rule) bool {
			return budgetOf(r).MaxCost == 5_000_000 && budgetOf(r).Location.String() == "Europe/Berlin"
		},
		"user_path:/customers:$month": func(r limiter.Rule) bool { return r.PerChild && budgetOf(r).MaxCost == 100_000 },
		"provider:openai:$week":       func(r limiter.Rule) bool { return r.Shadow && budgetOf(r).MaxCost == 1_000_000_000 },
		"model:gpt-4o:$hour":          func(r limiter.Rule) bool { return budgetOf(r).MaxCost == 250_500_000 },
		"key:*:$month":                func(r limiter.Rule) bool { return r.PerChild && budgetOf(r).MaxCost == 20_000_000 },
		"tag:feature=*:$day":          func(r limiter.Rule) bool { return r.PerChild && budgetOf(r).MaxCost == 3_000_000 },
		"user_path:/team/alpha:$day": func(r limiter.Rule) bool {
			return budgetOf(r).MaxCost == 2_500_000 && budgetOf(r).Location.String() == "Europe/Berlin"
		},
		"user_path:/team/alpha:$month":    func(r limiter.Rule) bool { return budgetOf(r).MaxCost == 40_000_000 },
		limiter.RuleKey("user_path:/:60"): func(r limiter.Rule) bool { return windowOf(r).MaxRequests == 10 },
	} {
		r, ok := byKey[key]
		if !ok || !check(r) {
			t.Errorf("rule %s: %+v (found %v)", key, r, ok)
		}
	}
	if cfg.DefaultPrice == nil || *cfg.DefaultPrice != (limiter.Price{Input: 5_000_000, Output: 15_000_000, CachedInput: 5_000_000}) {
		t.Errorf("default price %+v", cfg.DefaultPrice)
	}
	if p := cfg.Prices["my-llama"]; p != (limiter.Price{Input: 200_000, Output: 600_000, CachedInput: 50_000}) {
		t.Errorf("my-llama %+v", p)
	}
	if p, _ := cfg.PriceTable().Lookup("openai-eu", "gpt-4o"); p.Input != 2_750_000 {
		t.Errorf("openai-eu/gpt-4o %+v", p)
	}
}

// Every problem of every policy section is reported at once, each at its
// line.
func TestBadPolicyFile(t *testing.T) {
	_, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/bad_policy.yaml", "SET_BUDGET_X": "usd=5", "TOLLGATE_BUDGET_TIMEZONE": "Nowhere/Else"})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`testdata/bad_policy.yaml:1: budget_timezone: unknown time zone "Mars/Olympus"`,
		`prices.gpt-x: input: "-1" is not an amount of dollars`,
		`prices.gpt-x: output: "abc" is not an amount of dollars`,
		`prices.half: output: missing`,
		`rate_limits.user_paths[0].limits[0]: refill_per_second`,
		`rate_limits.user_paths[0].limits[0]: period: a bucket`,
		`rate_limits.user_paths[0].limits[1]: unknown window "tumbling"`,
		`rate_limits.tags[0]: value: missing`,
		`budgets.user_paths[0]: amount_usd: "0.0000001" has more than six decimals`,
		`budgets.user_paths[1]: unknown budget period "fortnight"`,
		`budgets.user_paths[2]: path is missing`,
		`budgets.models[0]: amount_usd: missing`,
		`SET_BUDGET_X: "usd=5": want usd=<amount>/<hour|day|week|month>`,
		`TOLLGATE_BUDGET_TIMEZONE: unknown time zone "Nowhere/Else"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

// The example's mock rule, kept when a real key replaces the mock, is
// warned about: it names a provider that is not there.
func TestWarnsOfRulesForMissingProviders(t *testing.T) {
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": "../gateway/tollgate.example.yaml", "OPENAI_API_KEY": "sk-x"})
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], `provider:mock:minute names provider "mock", which is not configured`) || !strings.Contains(w[0], "openai") {
		t.Fatalf("warnings %q", w)
	}
	if cfg, _ := load(t, Env{"TOLLGATE_CONFIG": "../gateway/tollgate.example.yaml"}); len(cfg.Warnings()) != 0 {
		t.Fatalf("with the mock there is nothing to warn of: %q", cfg.Warnings())
	}
}

func TestShapingClasses(t *testing.T) {
	dir := t.TempDir()
	write := func(yaml string) string {
		p := dir + "/c.yaml"
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": write("shaping:\n  default_class: batch\n  classes:\n    interactive: {max_wait: 100ms}\n    nightly: {max_wait: 5m}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Shaping.Classes; c["interactive"] != 100*time.Millisecond || c["nightly"] != 5*time.Minute || c["standard"] != 2*time.Second || cfg.Shaping.DefaultClass != "batch" {
		t.Fatalf("shaping %+v", cfg.Shaping)
	}
	_, err = load(t, Env{"TOLLGATE_CONFIG": write("gateway:\n  max_wait: {chat: 2s}\nshaping:\n  default_class: nope\n  classes:\n    Bad Name: {max_wait: 1s}\n    slow: {max_wait: 1h}\n")})
	for _, want := range []string{"gateway.max_wait: replaced by traffic classes", "default_class: \"nope\" is not a class", "a class name is lower-case", "not a duration from 0s to 15m"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	// The old scalar form gets the same message, not a YAML type error.
	_, err = load(t, Env{"TOLLGATE_CONFIG": write("gateway:\n  max_wait: 2s\n")})
	if err == nil || !strings.Contains(err.Error(), "gateway.max_wait: replaced by traffic classes") || strings.Contains(err.Error(), "unmarshal") {
		t.Errorf("a scalar max_wait: %v", err)
	}
	// With no default_class, a request naming no class has none: it
	// waits for nothing.
	cfg, err = load(t, Env{"TOLLGATE_CONFIG": write("shaping:\n  classes:\n    batch: {max_wait: 30s}\n")})
	if err != nil || cfg.Shaping.DefaultClass != "" {
		t.Errorf("default class %q, %v; want none", cfg.Shaping.DefaultClass, err)
	}
}

func TestFairShareConfig(t *testing.T) {
	p := t.TempDir() + "/c.yaml"
	_ = os.WriteFile(p, []byte(`
rate_limits:
  providers:
    - name: openai
      limits:
        - {period: minute, max_requests: 60, fair_share: {by: user_path, weights: {/T/A: 3}}}
`), 0o644)
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": p, "OPENAI_API_KEY": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if f := cfg.Rules[0].FairShare; f == nil || f.By != "user_path" || f.Weights["/t/a"] != 3 {
		t.Fatalf("fair share %+v", cfg.Rules[0].FairShare)
	}
	_ = os.WriteFile(p, []byte(`
rate_limits:
  providers:
    - name: openai
      limits:
        - {capacity: 6, refill_per_second: 1, ramp: {start: 1, step: 1, every: 1m}, fair_share: {by: child, weights: {a: 0}}}
`), 0o644)
	_, err = load(t, Env{"TOLLGATE_CONFIG": p, "OPENAI_API_KEY": "x"})
	for _, want := range []string{"only request and token windows ramp", "fair_share.by: child is for user-path rules", "fair_share.weights.a"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
}

func TestBudgetFairShareConfig(t *testing.T) {
	p := t.TempDir() + "/c.yaml"
	_ = os.WriteFile(p, []byte("budgets:\n  user_paths:\n    - {path: /, amount_usd: 100, period: day, fair_share: {by: child, weights: {research: 2}}}\n"), 0o644)
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": p})
	if err != nil {
		t.Fatal(err)
	}
	if f := cfg.Rules[0].FairShare; f == nil || f.By != "child" || f.Weights["research"] != 2 || budgetOf(cfg.Rules[0]).MaxCost == 0 {
		t.Fatalf("budget fair share %+v", cfg.Rules[0])
	}
}

// A bedrock provider: region, models as Bedrock ids, burndown overrides
// and service tiers; no key; the endpoint from the SDK's own variable
// (unless endpoints are ignored); quota: bedrock on provider and model
// rules.
func TestBedrockProvider(t *testing.T) {
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/bedrock.yaml", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Providers[0]
	if p.Type != "bedrock" || p.Region != "us-east-1" || p.BaseURL != "http://127.0.0.1:9" || p.APIKey != "" ||
		p.Burndown["anthropic.claude-3-5-sonnet"] != 2 || p.ServiceTiers["batch"] != "flex" || len(p.Models) != 2 {
		t.Fatalf("provider %+v", p)
	}
	if len(cfg.Rules) != 2 || windowOf(cfg.Rules[0]).Quota != limiter.QuotaBedrock || windowOf(cfg.Rules[1]).Quota != limiter.QuotaBedrock || windowOf(cfg.Rules[1]).MaxTokens != 60_000 {
		t.Fatalf("rules %+v", cfg.Rules)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Fatalf("warnings %v", w)
	}
	cfg, err = load(t, Env{"TOLLGATE_CONFIG": "testdata/bedrock.yaml", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:9",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"})
	if err != nil || cfg.Providers[0].BaseURL != "" {
		t.Fatalf("endpoints ignored: %v %q", err, cfg.Providers[0].BaseURL)
	}
	cfg, err = load(t, Env{"TOLLGATE_CONFIG": "", "SET_PROVIDER_RATE_LIMIT_BEDROCK": `[{"period":"minute","max_tokens":60000,"quota":"bedrock"}]`})
	if err != nil || len(cfg.Rules) != 1 || windowOf(cfg.Rules[0]).Quota != limiter.QuotaBedrock {
		t.Fatalf("quota from the environment: %v %+v", err, cfg.Rules)
	}
	if w := cfg.Warnings(); len(w) != 1 || !strings.Contains(w[0], "not configured") {
		t.Fatalf("warnings %v", w)
	}
}

func TestBadBedrockProvider(t *testing.T) {
	_, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/bad_bedrock.yaml", "K": "k"})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{
		`providers[0]: a bedrock provider has no API key`,
		`providers[0].region: "mars-1" is not an AWS region`,
		`"anthropic.claude-sonnet-4": 0 is outside 1..100`,
		`providers[0].service_tiers.batch: "cheap" is not a service tier`,
		`providers[1]: region, burndown and service_tiers are for bedrock providers`,
		`rate_limits.user_paths[0].limits[0]: quota: bedrock counts an upstream's quota: only provider and model rules take it`,
		`rate_limits.providers[0].limits[0]: unknown quota "vertex"`,
		`rate_limits.providers[0].limits[1]: quota: bedrock is for token windows, not concurrency rules`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

func TestAlertsConfig(t *testing.T) {
	cfg, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/alerts.yaml", "HOOK_SECRET": "from-env", "TOLLGATE_ALERT_TOPIC_ARN": "arn:aws:sns:eu-west-1:123456789012:alerts"})
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Alerts
	if len(a.Watch.Rules) != 2 || a.Watch.Rules[0].On != "budget:user_path:/team/a:month" || len(a.Watch.Rules[0].At) != 3 || a.Watch.Rules[1].On != "any" ||
		!a.Watch.Forecast || a.Watch.RefusalSpike != 50 || a.Watch.Upstream429Rate != 0.02 || a.Watch.EstimateFactor != 2 ||
		a.Watch.ClassWaits.Factor != 2 || a.Watch.ClassWaits.PerMinute != 10 || a.Every != 10*time.Second {
		t.Fatalf("alerts %+v", a)
	}
	if len(a.Webhooks) != 2 || a.Webhooks[0].Secret != "s3cret" || a.Webhooks[1].Secret != "from-env" || a.TopicARN != "arn:aws:sns:eu-west-1:123456789012:alerts" {
		t.Fatalf("webhooks %+v topic %q", a.Webhooks, a.TopicARN)
	}
	if cfg.Audit.Retention != 720*time.Hour {
		t.Fatalf("audit %v", cfg.Audit)
	}
	def, err := load(t, Env{"TOLLGATE_CONFIG": ""})
	if err != nil || def.Alerts.Every != 30*time.Second || def.Audit.Retention != 90*24*time.Hour || def.Alerts.Watch.Enabled() {
		t.Fatalf("defaults %+v %v", def.Alerts, err)
	}
}

func TestBadAlertsConfig(t *testing.T) {
	_, err := load(t, Env{"TOLLGATE_CONFIG": "testdata/bad_alerts.yaml", "TOLLGATE_ALERT_TOPIC_ARN": "arn:aws:sqs:x"})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"testdata/bad_alerts.yaml:3: alerts.rules[0].on",
		"alerts.rules[0].at[0]: 80 is not a fraction",
		"alerts.rules[1].on: required",
		"alerts.rules[1].at: give at least one",
		"alerts.upstream_429_after_admission.rate",
		`alerts.every: "1ms"`,
		`alerts.webhooks[0].url: "ftp://example.com"`,
		"alerts.webhooks[0]: give the secret by one of",
		`audit.retention: "1m"`,
		"TOLLGATE_ALERT_TOPIC_ARN",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the errors lack %q:\n%v", want, err)
		}
	}
}

// windowOf, budgetOf: a rule's limit of that kind, or its zero value.
func windowOf(r limiter.Rule) limiter.Window { w, _ := r.Limit.(limiter.Window); return w }
func budgetOf(r limiter.Rule) limiter.Budget { b, _ := r.Limit.(limiter.Budget); return b }

// maxima are a window's request and token limits, or a gauge's requests
// in flight.
func maxima(r limiter.Rule) (req, tok int64) {
	switch l := r.Limit.(type) {
	case limiter.Window:
		return l.MaxRequests, l.MaxTokens
	case limiter.Gauge:
		return l.MaxInFlight, 0
	}
	return 0, 0
}
