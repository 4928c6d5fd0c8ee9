package config

import (
	"os"
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// Any YAML, and any rate-limit variable, is either refused with errors or
// loads rules the limiter accepts: a configuration cannot put a rule in
// force that breaks the limiter's invariants (a limit out of range, a
// negative period, too many slots per shard).
func FuzzRuleConfig(f *testing.F) {
	good, _ := os.ReadFile("testdata/good.yaml")
	f.Add(string(good), "rpm=10,tpm=1000")
	f.Add("rate_limits:\n  user_paths:\n    - path: /a\n      limits:\n        - period: minute\n          max_tokens: 9223372036854775807\n", "tpm=-5")
	f.Add("rate_limits:\n  providers:\n    - name: p\n      limits:\n        - period: concurrent\n          max_requests: 100000\n", `[{"period_seconds":0,"max_requests":1}]`)
	f.Add("gateway:\n  max_output_tokens: 0\n  stream_write_timeout: 1ns\n", "concurrent=99999999999")
	f.Fuzz(func(t *testing.T, yaml, value string) {
		cfg := &Config{RateLimitsEnabled: true}
		err := cfg.loadFile("fuzz.yaml", []byte(yaml))
		envRules, envErr := rulesFromEnv(Env{"SET_RATE_LIMIT_": value, "SET_PROVIDER_RATE_LIMIT_P": value})
		if err == nil {
			if _, rerr := limiter.NewRules(cfg.Rules); rerr != nil {
				t.Fatalf("the file loaded rules the limiter refuses: %v\n%s", rerr, yaml)
			}
		}
		if envErr == nil {
			if _, rerr := limiter.NewRules(envRules); rerr != nil {
				t.Fatalf("%q loaded rules the limiter refuses: %v", value, rerr)
			}
		}
	})
}
