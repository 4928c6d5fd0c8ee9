package tests

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The documentation's own checks: what README.md, ARCHITECTURE.md and the
// pages under docs/ name must exist, and the reference pages must list
// what the code has. The YAML keys and environment variables are checked
// in functions/config (TestReferenceListsEveryYAMLKey,
// TestReferenceListsEveryVariable); the shell blocks by TestReadmeCommands.

// pendingDocs are pages linked before they exist, being written on another
// branch: a link to one is not yet an error.
var pendingDocs = map[string]bool{"docs/bedrock.md": true}

// markdownFiles returns the repository's documentation: README.md,
// ARCHITECTURE.md and every page under docs/, relative to the root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	return append([]string{"ARCHITECTURE.md"}, docFiles(t)...)
}

// prose returns a Markdown file's lines outside fenced code blocks.
func prose(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fenced := false
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
)

// anchors returns the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range prose(t, file) {
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		slug := b.String()
		for i := 1; out[slug]; i++ {
			slug = b.String() + "-" + strconv.Itoa(i)
		}
		out[slug] = true
	}
	return out
}

// TestDocsLinksResolve checks that every relative link of the
// documentation points at a file of the repository, and every #anchor at
// one of that file's headings.
func TestDocsLinksResolve(t *testing.T) {
	checked := 0
	for _, file := range markdownFiles(t) {
		for n, line := range prose(t, file) {
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				resolved := file
				if path != "" {
					resolved = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
				}
				checked++
				if pendingDocs[resolved] {
					continue
				}
				if _, err := os.Stat(filepath.Join("..", resolved)); err != nil {
					t.Errorf("%s: line %d links to %s, which does not exist", file, n+1, target)
					continue
				}
				if anchor != "" && strings.HasSuffix(resolved, ".md") && !anchors(t, resolved)[anchor] {
					t.Errorf("%s: line %d links to %s, but %s has no heading #%s", file, n+1, target, resolved, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d links checked", checked)
	}
}

var (
	testNameRE  = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z0-9][A-Za-z0-9_]*\*?`)
	funcRE      = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]+)\(`)
	scenarioRE  = regexp.MustCompile(`\{"([A-Z][A-Za-z0-9]+)", test`)
	suiteNameRE = regexp.MustCompile("suite `([A-Za-z0-9]+)`")
)

// testFuncs returns the names of every test, benchmark and fuzz target of
// the repository, and the scenarios of the store behaviour suite.
func testFuncs(t *testing.T) (funcs, scenarios map[string]bool) {
	t.Helper()
	funcs, scenarios = map[string]bool{}, map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != "..") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRE.FindAllStringSubmatch(string(data), -1) {
			funcs[m[1]] = true
		}
		if strings.Contains(filepath.ToSlash(path), "limiter/storetest/") {
			for _, m := range scenarioRE.FindAllStringSubmatch(string(data), -1) {
				scenarios[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return funcs, scenarios
}

// covers reports whether a name as the documentation writes it ("TestX",
// or "BenchmarkCount*" for every benchmark whose name starts so) names fn.
func covers(name, fn string) bool {
	if prefix, ok := strings.CutSuffix(name, "*"); ok {
		return strings.HasPrefix(fn, prefix)
	}
	return name == fn
}

// TestDocsNameRealTests checks that every test, benchmark and fuzz target
// the documentation names exists, and every scenario of the behaviour
// suite it names as suite `Name`: a promise cannot point at a test that
// was renamed or removed.
func TestDocsNameRealTests(t *testing.T) {
	funcs, scenarios := testFuncs(t)
	if len(funcs) < 100 || len(scenarios) < 20 {
		t.Fatalf("found %d tests and %d suite scenarios", len(funcs), len(scenarios))
	}
	named := 0
	for _, file := range markdownFiles(t) {
		for n, line := range prose(t, file) {
			for _, name := range testNameRE.FindAllString(line, -1) {
				named++
				if !slices.ContainsFunc(slices.Collect(maps.Keys(funcs)), func(fn string) bool { return covers(name, fn) }) {
					t.Errorf("%s: line %d names %s, which is no test, benchmark or fuzz target", file, n+1, name)
				}
			}
			for _, m := range suiteNameRE.FindAllStringSubmatch(line, -1) {
				if !scenarios[m[1]] {
					t.Errorf("%s: line %d names suite %s, which is no scenario of limiter/storetest", file, n+1, m[1])
				}
			}
		}
	}
	if named < 50 {
		t.Fatalf("the documentation names only %d tests", named)
	}
}

// firstColumn returns the code spans of the first column of a page's
// tables.
func firstColumn(t *testing.T, file string) []string {
	t.Helper()
	var out []string
	for _, line := range prose(t, file) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cell, _, _ := strings.Cut(line[1:], "|")
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// sameSets reports, as test errors, what one set has and the other lacks.
func sameSets(t *testing.T, what, code, doc string, inCode, inDoc map[string]bool) {
	t.Helper()
	if len(inCode) == 0 {
		t.Fatalf("found no %s in %s", what, code)
	}
	for k := range inCode {
		if !inDoc[k] {
			t.Errorf("%s has %s %q, which %s does not list", code, what, k, doc)
		}
	}
	for k := range inDoc {
		if !inCode[k] {
			t.Errorf("%s lists %s %q, which %s does not have", doc, what, k, code)
		}
	}
}

// TestDocsListEveryMakeTarget checks docs/reference/make.md against the
// targets make help lists (those with a "## " description).
func TestDocsListEveryMakeTarget(t *testing.T) {
	data, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	inMake := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z-]+):.*## `).FindAllStringSubmatch(string(data), -1) {
		inMake[m[1]] = true
	}
	inDoc := map[string]bool{}
	for _, c := range firstColumn(t, "docs/reference/make.md") {
		if target, ok := strings.CutPrefix(c, "make "); ok {
			inDoc[target] = true
		}
	}
	sameSets(t, "target", "the Makefile", "docs/reference/make.md", inMake, inDoc)
}

var (
	patternRE    = regexp.MustCompile(`(?:HandleFunc|Handle|h\.handle)\("((?:[A-Z]+ )?/[^"]*)"(\s*\+\s*k\.collection\s*\+\s*"[^"]*"|\s*\+\s*k\.collection)?`)
	crudRE       = regexp.MustCompile(`(?:HandleFunc|h\.handle)\("([A-Z]+) "\s*\+\s*k\.collection(?:\s*\+\s*"([^"]*)")?`)
	collectionRE = regexp.MustCompile(`collection:\s*"(/admin/[^"]+)"`)
	paramRE      = regexp.MustCompile(`\{[^}]*\}[^/]*`)
	routeRE      = regexp.MustCompile(`^(?:(GET|POST|PUT|PATCH|DELETE) )?(/\S*)$`)
)

// normRoute writes a route as the comparison does: path parameters (and
// what follows one in its segment, Gemini's ":generateContent") as {}.
func normRoute(r string) string {
	return paramRE.ReplaceAllString(strings.TrimSpace(r), "{}")
}

// routesOf returns the routes the ServeMux patterns of files register,
// catch-alls left out.
func routesOf(t *testing.T, files ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	var collections []string
	var srcs []string
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, string(data))
		for _, m := range collectionRE.FindAllStringSubmatch(string(data), -1) {
			collections = append(collections, m[1])
		}
	}
	for _, src := range srcs {
		for _, m := range patternRE.FindAllStringSubmatch(src, -1) {
			if m[2] != "" {
				continue // a collection's route: below
			}
			p := m[1]
			if _, path, _ := strings.Cut(p, " "); p == "/" || p == "/admin/" || path == "/" {
				continue
			}
			out[normRoute(p)] = true
		}
		for _, m := range crudRE.FindAllStringSubmatch(src, -1) {
			for _, c := range collections {
				out[normRoute(m[1]+" "+c+m[2])] = true
			}
		}
	}
	return out
}

// documentedRoutes returns the routes the first column of a page's tables
// names.
func documentedRoutes(t *testing.T, file string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, c := range firstColumn(t, file) {
		if routeRE.MatchString(c) {
			out[normRoute(c)] = true
		}
	}
	return out
}

// TestDocsListEveryRoute checks the route tables of endpoints.md and
// admin-api.md against the patterns the gateway's and the admin API's
// ServeMux register.
func TestDocsListEveryRoute(t *testing.T) {
	gateway := routesOf(t, "functions/gateway/proxy/handler.go", "functions/app/app.go")
	sameSets(t, "route", "the gateway's ServeMux", "docs/reference/endpoints.md", gateway, documentedRoutes(t, "docs/reference/endpoints.md"))
	admin := routesOf(t, "functions/admin/adminapi/adminapi.go", "functions/admin/adminapi/crud.go",
		"functions/admin/adminapi/rules.go", "functions/admin/adminapi/budgets.go")
	admin["GET /admin/ui"] = true // adminui's page (adminui.Owns), served before the mux
	sameSets(t, "route", "the admin API's ServeMux", "docs/reference/admin-api.md", admin, documentedRoutes(t, "docs/reference/admin-api.md"))
}

// TestDocsListEveryTemplateParameter checks the parameter table of
// docs/operations/deploy.md against template.yaml's parameters.
func TestDocsListEveryTemplateParameter(t *testing.T) {
	inTemplate := map[string]bool{}
	for name := range get(cfn(t, "../template.yaml"), "Parameters").(map[string]any) {
		inTemplate[name] = true
	}
	inDoc := map[string]bool{}
	for _, c := range firstColumn(t, "docs/operations/deploy.md") {
		if regexp.MustCompile(`^[A-Z][A-Za-z]+$`).MatchString(c) {
			inDoc[c] = true
		}
	}
	sameSets(t, "parameter", "template.yaml", "docs/operations/deploy.md", inTemplate, inDoc)
}

// TestDocsListEveryBenchmark checks that docs/benchmarks.md names every
// benchmark of the repository ("BenchmarkCount*" covers every benchmark
// whose name starts so); TestDocsNameRealTests checks the other way.
func TestDocsListEveryBenchmark(t *testing.T) {
	listedIn(t, "Benchmark", "docs/benchmarks.md")
}

// TestDocsListEveryFuzzTarget checks that docs/testing.md names every fuzz
// target of the repository.
func TestDocsListEveryFuzzTarget(t *testing.T) {
	listedIn(t, "Fuzz", "docs/testing.md")
}

func listedIn(t *testing.T, kind, file string) {
	t.Helper()
	funcs, _ := testFuncs(t)
	var named []string
	for _, line := range prose(t, file) {
		named = append(named, testNameRE.FindAllString(line, -1)...)
	}
	found := 0
	for fn := range funcs {
		if !strings.HasPrefix(fn, kind) {
			continue
		}
		found++
		if !slices.ContainsFunc(named, func(n string) bool { return covers(n, fn) }) {
			t.Errorf("%s does not name %s", file, fn)
		}
	}
	if found == 0 {
		t.Fatalf("found no %s functions", kind)
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// TestArchitectureNamesRealCode checks the tables of ARCHITECTURE.md's
// "Where each decision lives": in each cell, every name in backticks that
// follows a file (`proxy/serve.go`) or a package folder
// (`providers/tokens`) must occur in that file or folder's Go code, each
// part of Type.Method as a word. A function renamed or moved without the
// table following fails it.
func TestArchitectureNamesRealCode(t *testing.T) {
	data, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "## Where each decision lives")
	if start < 0 {
		t.Fatal(`ARCHITECTURE.md has no "## Where each decision lives"`)
	}
	section := text[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	source := map[string]string{} // a file or folder → its Go code
	codeOf := func(ref string) (string, bool) {
		if src, ok := source[ref]; ok {
			return src, true
		}
		for _, p := range []string{ref, "functions/gateway/" + ref, "functions/admin/" + ref} {
			info, err := os.Stat(filepath.Join("..", p))
			if err != nil {
				continue
			}
			var b strings.Builder
			files := []string{filepath.Join("..", p)}
			if info.IsDir() {
				files, _ = filepath.Glob(filepath.Join("..", p, "*.go"))
			}
			for _, f := range files {
				if strings.HasSuffix(f, "_test.go") {
					continue
				}
				d, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				b.Write(d)
			}
			source[ref] = b.String()
			return source[ref], true
		}
		return "", false
	}
	checked := 0
	for n, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, cell := range strings.Split(line, "|") {
			src, in := "", ""
			for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
				name := m[1]
				switch {
				case strings.HasSuffix(name, ".go") || strings.Count(name, "/") > 0 && !strings.Contains(name, " ") && !strings.HasPrefix(name, "/"):
					s, ok := codeOf(name)
					if !ok {
						t.Errorf("ARCHITECTURE.md: %q names %s, which is no file or folder", strings.TrimSpace(cell), name)
					}
					src, in = s, name
				case src != "" && identRE.MatchString(name):
					checked++
					for part := range strings.SplitSeq(name, ".") {
						if !regexp.MustCompile(`\b` + part + `\b`).MatchString(src) {
							t.Errorf("ARCHITECTURE.md (section line %d): %s is not in %s", n+1, name, in)
						}
					}
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d names checked in ARCHITECTURE.md", checked)
	}
}

// TestDocsListEveryMetric checks the metric table of
// docs/operations/metrics.md against the metric names infra/metrics
// declares (Name = "Name").
func TestDocsListEveryMetric(t *testing.T) {
	data, err := os.ReadFile("../infra/metrics/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	inCode := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+([A-Z][A-Za-z]+)\s+= "([A-Z][A-Za-z]+)"`).FindAllStringSubmatch(string(data), -1) {
		if m[1] == m[2] {
			inCode[m[1]] = true
		}
	}
	inDoc := map[string]bool{}
	for _, c := range firstColumn(t, "docs/operations/metrics.md") {
		if regexp.MustCompile(`^[A-Z][A-Za-z]+$`).MatchString(c) {
			inDoc[c] = true
		}
	}
	sameSets(t, "metric", "infra/metrics", "docs/operations/metrics.md", inCode, inDoc)
}
