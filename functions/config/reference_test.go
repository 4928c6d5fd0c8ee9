package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The reference documents every YAML key and every environment variable,
// and nothing else: docs/reference/configuration.md and
// docs/reference/environment.md list them in tables whose first column
// holds the key or the variable in backticks. The conventions, which
// configuration.md states for its readers:
//
//   - a key is its dotted path from the top of tollgate.yaml:
//     gateway.max_output_tokens;
//   - "[]" follows a list whose entries are mappings:
//     providers[].base_url (a list of scalars is its key alone:
//     providers[].models);
//   - "<name>" (any word between angle brackets) stands for the key of a
//     mapping whose values are mappings: prices.<model>.input,
//     shaping.classes.<name>.max_wait (a mapping of scalars is its key
//     alone: providers[].deployments);
//   - "{a,b}" is the shell's brace expansion, for one shape under several
//     keys: rate_limits.{user_paths,providers}[].limits[].period;
//   - a variable family is written with its variable part in angle
//     brackets: SET_RATE_LIMIT_<PATH>, <NAME>_API_KEY.
const (
	configurationDoc = "../../docs/reference/configuration.md"
	environmentDoc   = "../../docs/reference/environment.md"
)

// TestReferenceListsEveryYAMLKey derives every key tollgate.yaml may hold
// from the yaml tags of the file's structs (file and everything it holds)
// and checks that configuration.md documents each, and no key that is not
// there (a documented key may also be a section or list that holds keys:
// rate_limits.user_paths[].limits).
func TestReferenceListsEveryYAMLKey(t *testing.T) {
	keys := yamlKeys(reflect.TypeFor[file](), "", nil)
	if len(keys) < 50 {
		t.Fatalf("found only %d keys in the config structs: %v", len(keys), keys)
	}
	documented := documentedKeys(t, configurationDoc)
	for _, k := range keys {
		if !documented[k] {
			t.Errorf("%s does not document the YAML key `%s` (a row whose first column is it in backticks)", configurationDoc, k)
		}
	}
	exists := map[string]bool{}
	for _, k := range keys {
		for i := range len(k) {
			if k[i] == '.' {
				exists[strings.TrimSuffix(k[:i], "[]")] = true
			}
		}
		exists[k] = true
	}
	for k := range documented {
		if !exists[k] {
			t.Errorf("%s documents `%s`, which is no key of tollgate.yaml", configurationDoc, k)
		}
	}
}

// TestReferenceListsEveryVariable checks that environment.md documents
// every variable of Variables and testVariables, and no other; and that
// Variables and testVariables hold every variable the code reads.
func TestReferenceListsEveryVariable(t *testing.T) {
	want := map[string]bool{}
	for _, v := range append(slices.Clone(Variables), testVariables...) {
		want[v.Doc()] = true
	}
	documented := documentedKeys(t, environmentDoc)
	for name := range want {
		if !documented[name] {
			t.Errorf("%s does not document `%s` (a row whose first column names it in backticks)", environmentDoc, name)
		}
	}
	for name := range documented {
		if !want[name] {
			t.Errorf("%s documents `%s`, which is not in config.Variables (nor the tests' variables)", environmentDoc, name)
		}
	}
}

// testVariables are the variables only the tests and the Makefile's test
// targets read; environment.md lists them apart.
var testVariables = []Variable{
	{Name: "TOLLGATE_REQUIRE_DYNAMODB"},
	{Name: "TOLLGATE_REQUIRE_BROWSER"},
	{Name: "TOLLGATE_ARTIFACTS"},
	{Name: "TOLLGATE_UPDATE_SCREENSHOTS"},
	{Name: "TOLLGATE_UPDATE"},
	{Name: "TOLLGATE_HEAP_PROFILE"},
}

// TestVariablesListEveryRead finds, in every Go file of the module, each
// place an environment variable is read (os.Getenv, os.LookupEnv, an index
// of a variable named env, or strings.HasPrefix against a variable-like
// prefix) and checks that Variables (or testVariables) holds it: a name
// read as a constant is an exact entry, "PREFIX_" + x a prefix family,
// x + "_SUFFIX" a suffix family.
func TestVariablesListEveryRead(t *testing.T) {
	reads := envReads(t, "../..")
	if len(reads) < 25 {
		t.Fatalf("found only %d environment reads: %v", len(reads), reads)
	}
	known := map[Variable]bool{}
	for _, v := range append(slices.Clone(Variables), testVariables...) {
		known[v] = true
	}
	for v, where := range reads {
		if !known[v] {
			t.Errorf("%s reads %s, which config.Variables does not list (nor the tests' variables)", where, v.Doc())
		}
	}
}

// yamlKeys returns the documented form of every key under type t, whose
// own path is prefix; outer holds the struct types that enclose t, so
// that a type holding itself is reported, not walked for ever.
func yamlKeys(t reflect.Type, prefix string, outer []reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if leaf(t) {
		return []string{prefix}
	}
	if slices.Contains(outer, t) {
		panic("config: " + t.String() + " holds itself at " + prefix + ": make it a leaf in reference_test.go")
	}
	if t.Kind() == reflect.Struct {
		outer = append(slices.Clip(outer), t)
	}
	switch t.Kind() {
	case reflect.Struct:
		var keys []string
		for f := range t.Fields() {
			tag := f.Tag.Get("yaml")
			name, opts, _ := strings.Cut(tag, ",")
			switch {
			case name == "-":
				continue
			case opts == "inline":
				keys = append(keys, yamlKeys(f.Type, prefix, outer)...)
				continue
			case name == "":
				name = strings.ToLower(f.Name)
			}
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			keys = append(keys, yamlKeys(f.Type, path, outer)...)
		}
		return keys
	case reflect.Slice:
		if composite(t.Elem()) {
			return yamlKeys(t.Elem(), prefix+"[]", outer)
		}
	case reflect.Map:
		if composite(t.Elem()) {
			return yamlKeys(t.Elem(), prefix+".<>", outer)
		}
	}
	return []string{prefix}
}

// leaf reports whether t decodes itself, whatever the YAML holds: it
// implements yaml.Unmarshaler, or is a yaml.Node (a key read raw).
func leaf(t reflect.Type) bool {
	return t == reflect.TypeFor[yaml.Node]() || reflect.PointerTo(t).Implements(reflect.TypeFor[yaml.Unmarshaler]())
}

// composite reports whether t is decoded from a mapping of its own keys.
func composite(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if leaf(t) {
		return false
	}
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Map || t.Kind() == reflect.Slice
}

var (
	rowRE         = regexp.MustCompile("^\\|\\s*(`[^|]*)\\|")
	codeRE        = regexp.MustCompile("`([^`]+)`")
	placeholderRE = regexp.MustCompile(`<[A-Za-z_ -]*>`)
	bracesRE      = regexp.MustCompile(`\{([^{}]*)\}`)
)

// documentedKeys returns what the first column of a doc's tables names in
// backticks, brace-expanded and with placeholders written "<>".
func documentedKeys(t *testing.T, doc string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for line := range strings.SplitSeq(string(data), "\n") {
		m := rowRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		for _, c := range codeRE.FindAllStringSubmatch(m[1], -1) {
			for _, k := range expand(c[1]) {
				out[placeholderRE.ReplaceAllString(k, "<>")] = true
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no table rows naming keys", doc)
	}
	return out
}

// expand brace-expands s: "a.{b,c}.d" is a.b.d and a.c.d.
func expand(s string) []string {
	loc := bracesRE.FindStringSubmatchIndex(s)
	if loc == nil {
		return []string{s}
	}
	var out []string
	for alt := range strings.SplitSeq(s[loc[2]:loc[3]], ",") {
		out = append(out, expand(s[:loc[0]]+strings.TrimSpace(alt)+s[loc[1]:])...)
	}
	return out
}

// Doc is how the reference names v: a family's variable part is "<>".
func (v Variable) Doc() string {
	switch {
	case v.Prefix:
		return v.Name + "<>"
	case v.Suffix:
		return "<>" + v.Name
	}
	return v.Name
}

var variableLike = regexp.MustCompile(`^_?[A-Z][A-Z0-9]*(_[A-Z0-9]+)*_?$`)

// envReads returns every variable the Go files under root read, with
// where (file:line) it was first seen.
func envReads(t *testing.T, root string) map[Variable]string {
	t.Helper()
	fset := token.NewFileSet()
	type pkgFile struct {
		pkg  string
		file *ast.File
	}
	var files []pkgFile
	consts := map[string]string{} // "pkg.Name" → value
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, pkgFile{f.Name.Name, f})
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, _ := strconv.Unquote(lit.Value)
							consts[f.Name.Name+"."+name.Name] = s
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reads := map[Variable]string{}
	for _, pf := range files {
		str := func(e ast.Expr) (string, bool) {
			switch e := e.(type) {
			case *ast.BasicLit:
				if e.Kind == token.STRING {
					s, err := strconv.Unquote(e.Value)
					return s, err == nil
				}
			case *ast.Ident:
				s, ok := consts[pf.pkg+"."+e.Name]
				return s, ok
			case *ast.SelectorExpr:
				if x, ok := e.X.(*ast.Ident); ok {
					s, ok := consts[x.Name+"."+e.Sel.Name]
					return s, ok
				}
			}
			return "", false
		}
		note := func(v Variable, at token.Pos) {
			if !variableLike.MatchString(v.Name) {
				return
			}
			if _, seen := reads[v]; !seen {
				p := fset.Position(at)
				reads[v] = p.Filename + ":" + strconv.Itoa(p.Line)
			}
		}
		name := func(e ast.Expr) {
			if s, ok := str(e); ok {
				note(Variable{Name: s}, e.Pos())
				return
			}
			if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
				if s, ok := str(b.X); ok {
					note(Variable{Name: s, Prefix: true}, e.Pos())
				} else if s, ok := str(b.Y); ok {
					note(Variable{Name: s, Suffix: true}, e.Pos())
				}
			}
		}
		ast.Inspect(pf.file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || len(n.Args) == 0 {
					return true
				}
				pkg, _ := sel.X.(*ast.Ident)
				switch {
				case pkg == nil:
				case pkg.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv"):
					name(n.Args[0])
				case pkg.Name == "strings" && sel.Sel.Name == "HasPrefix" && len(n.Args) == 2:
					if s, ok := str(n.Args[1]); ok && strings.HasSuffix(s, "_") && variableLike.MatchString(s) {
						note(Variable{Name: s, Prefix: true}, n.Pos())
					}
				}
			case *ast.IndexExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "env" {
					name(n.Index)
				}
			}
			return true
		})
	}
	return reads
}
