package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func loadText(t *testing.T, yaml string) (*Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return load(t, Env{"TOLLGATE_CONFIG": p})
}

func TestMigrations(t *testing.T) {
	const head = "providers:\n  - {name: openai, type: mock}\nmigrations:\n"
	cfg, err := loadText(t, head+`  - name: mini
    from: openai/gpt-4o
    to: openai/gpt-4o-mini
    scope: /team
    share: {start: 1.5, step: 5, every: 1h}
    sticky: tag:tenant
    hold_when: {upstream_429_rate: 0.02, p95_latency_ratio: 1.5}
    rollback_when: {error_rate: 0.1}
`)
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Migrations[0]
	if m.Start != 1.5 || m.Step != 5 || m.Max != 100 || m.Every != time.Hour || m.Sticky != "tag:tenant" || m.Scope != "/team" ||
		*m.HoldWhen.Upstream429Rate != 0.02 || m.HoldWhen.ErrorRate != nil || *m.RollbackWhen.ErrorRate != 0.1 {
		t.Fatalf("%+v", m)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"  - {name: Mini, from: openai/a, to: openai/b, share: {start: 1, step: 1, every: 1h}}", "is not lower-case"},
		{"  - {name: m, from: openai/a, to: openai/a, share: {start: 1, step: 1, every: 1h}}", "the same model"},
		{"  - {name: m, from: azure/a, to: openai/b, share: {start: 1, step: 1, every: 1h}}", "names no provider"},
		{"  - {name: m, from: openai/a, to: openai/b, share: {start: 1, step: 1, every: 1h}, sticky: ip}", "is not user_path"},
		{"  - {name: m, from: openai/a, to: openai/b, share: {start: 1.234, step: 1, every: 1h}}", "more than two decimals"},
		{"  - {name: m, from: openai/a, to: openai/b, share: {start: 50, step: 1, every: 1h, max: 20}}", "above max"},
		{"  - {name: m, from: openai/a, to: openai/b, share: {start: 1, step: 1, every: 1ms}}", "not a duration"},
		{"  - {name: m, from: openai/a, to: openai/b, share: {start: 1, step: 1, every: 1h}, hold_when: {error_rate: 2}}", "not a fraction"},
		{"  - {name: m, from: openai/a, to: openai/b}", ".share: give"},
		{"  - {name: m, from: openai/a, to: openai/b, share: {start: 1, step: 1, every: 1h}}\n" +
			"  - {name: n, from: openai/a, to: openai/c, scope: /team, share: {start: 1, step: 1, every: 1h}}", "both migrate"},
	} {
		if _, err := loadText(t, head+tc.yaml+"\n"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
