package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// Seed 000 (GoModel's rate-limit docs) documents the admin API with curl,
// Python and Node examples; tollgate promises they work as written
// (DESIGN §5). testdata/seed000 holds them verbatim, one file each, in the
// seed's order; TestSeedExamplesAreVerbatim checks the copies against the
// seed where the steering repository is checked out beside this one.

const seedExamples = "testdata/seed000"

// seedFile is seed 000 where the steering repository sits beside this
// one (../shared/seeds), or "" when it does not.
func seedFile(t *testing.T) string {
	t.Helper()
	matches, _ := filepath.Glob("../../shared/seeds/000_*.txt")
	if len(matches) == 0 {
		return ""
	}
	return matches[0]
}

// TestSeedExamplesAreVerbatim checks that every admin example of seed 000
// is in testdata/seed000, unchanged, and nothing else is.
func TestSeedExamplesAreVerbatim(t *testing.T) {
	path := seedFile(t)
	if path == "" {
		t.Skip("the steering repository (../shared/seeds) is not checked out beside this one; the copies are checked where it is")
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(seedExamples, "*"))
	if len(files) != 12 {
		t.Fatalf("%d examples in %s, want the seed's 12 (4 calls × curl, Python, Node)", len(files), seedExamples)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if !strings.Contains(string(seed), strings.TrimSuffix(string(b), "\n")) {
			t.Errorf("%s is not verbatim in %s", f, path)
		}
	}
}

// TestSeedAdminExamples runs seed 000's admin examples as written against
// a gateway with a master key: the curl ones in sh, the Node ones with the
// npm openai client, and the Python ones where Python's openai package is
// installed (it is not on machines without PyPI). The one change is the
// address: the seed's http://localhost:8080 is the test's gateway.
// GOMODEL_MASTER_KEY is the master key, as the seed names it. After each
// example the rules are what it says it does: the seed's PUT creates or
// updates (no version needed), its DELETE takes a JSON body.
func TestSeedAdminExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	prefix := dynamotest.Prefix(t)
	in := newInstance(t, prefix, time.Now(), config.Env{})
	python := exec.Command("python3", "-c", "import openai, httpx").Run() == nil
	dir, err := os.MkdirTemp(".", ".seed000-") // under tests/, so node finds tests/node_modules
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	run := func(t *testing.T, name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(seedExamples, name))
		if err != nil {
			t.Fatal(err)
		}
		src := strings.ReplaceAll(string(b), "http://localhost:8080", in.srv.URL)
		script := filepath.Join(dir, name)
		if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var cmd *exec.Cmd
		switch filepath.Ext(name) {
		case ".sh":
			cmd = exec.CommandContext(ctx, "sh", script)
		case ".mjs":
			cmd = exec.CommandContext(ctx, "node", script)
		case ".py":
			cmd = exec.CommandContext(ctx, "python3", script)
		}
		cmd.Env = append(os.Environ(), "GOMODEL_MASTER_KEY="+master)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if strings.Contains(string(out), `"error"`) {
			t.Fatalf("%s answered an error:\n%s", name, out)
		}
		return string(out)
	}
	const teamRule, providerRule = "user_path:/team/alpha:minute", "provider:openai:minute"
	for _, ex := range []struct {
		name  string
		check func(t *testing.T, out string, rules map[string]ruleDoc)
	}{
		{"1_list", func(t *testing.T, out string, _ map[string]ruleDoc) {
			if !strings.Contains(out, "rate_limits") {
				t.Fatalf("the list printed %s", out)
			}
		}},
		{"2_put_user_path", func(t *testing.T, _ string, rules map[string]ruleDoc) {
			if r, ok := rules[teamRule]; !ok || r.MaxRequests != 100 || r.MaxTokens != 50000 {
				t.Fatalf("after the PUT: %+v", rules)
			}
		}},
		{"3_put_provider", func(t *testing.T, _ string, rules map[string]ruleDoc) {
			if r, ok := rules[providerRule]; !ok || r.MaxRequests != 500 {
				t.Fatalf("after the PUT: %+v", rules)
			}
		}},
		{"4_delete", func(t *testing.T, _ string, rules map[string]ruleDoc) {
			if _, ok := rules[providerRule]; ok {
				t.Fatalf("the provider rule is still there: %+v", rules)
			}
			if _, ok := rules[teamRule]; !ok {
				t.Fatalf("the delete took the user-path rule too: %+v", rules)
			}
		}},
	} {
		for _, lang := range []string{"sh", "mjs", "py"} {
			t.Run(ex.name+"."+lang, func(t *testing.T) {
				if lang == "py" && !python {
					t.Skip("Python's openai and httpx packages are not installed (no PyPI on this machine)")
				}
				if ex.name == "4_delete" {
					// Each language deletes the rule the example before made.
					if s, b := in.call(t, "PUT", "/admin/rate-limits", master,
						`{"scope":"provider","subject":"openai","limit_key":{"period":"minute"},"max_requests":500}`); s/100 != 2 {
						t.Fatalf("setting up the delete: %d %s", s, b)
					}
				}
				out := run(t, ex.name+"."+lang)
				ex.check(t, out, listRules(t, in))
			})
		}
	}
	// The seed's reset-one and reset bodies, as its text gives them.
	if s, b := in.call(t, "POST", "/admin/rate-limits/reset-one", master, `{"scope":"user_path","subject":"/team/alpha","period":"minute"}`); s != 200 {
		t.Fatalf("reset-one with {scope, subject, period}: %d %s", s, b)
	}
	if s, b := in.call(t, "POST", "/admin/rate-limits/reset", master, `{"confirmation":"reset"}`); s != 200 {
		t.Fatalf("reset: %d %s", s, b)
	}
}
