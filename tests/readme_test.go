package tests

import (
	"bufio"
	"bytes"
	"context"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeBlock is one fenced shell block of README.md or of a page under
// docs/.
type readmeBlock struct {
	file   string // relative to the repository's root: README.md, docs/…
	line   int    // of the opening fence
	marker string // the HTML comment just before it: "illustrative: …", "run: output below", "run: errors expected", or ""
	script string
	// output is the fenced block right after, for "run: output below".
	output string
}

var markerRE = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)

// docFiles returns README.md, then every Markdown file under docs/ in
// lexical order: the order TestReadmeCommands runs their blocks in, one
// gateway for all, so a page's blocks may rely on what README.md's did.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("../docs", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel("..", path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// readmeShellBlocks returns the sh, bash and shell blocks of README.md and
// of every page under docs/.
func readmeShellBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	for _, f := range docFiles(t) {
		blocks = append(blocks, shellBlocks(t, f)...)
	}
	return blocks
}

// shellBlocks returns one Markdown file's sh, bash and shell blocks.
func shellBlocks(t *testing.T, file string) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	sc := bufio.NewScanner(bytes.NewReader(data))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); i++ {
		open := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(open, "```") {
			continue
		}
		lang := strings.TrimPrefix(open, "```")
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		var body []string
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, strings.TrimPrefix(lines[j], indent))
		}
		if lang == "sh" || lang == "bash" || lang == "shell" {
			b := readmeBlock{file: file, line: i + 1, script: strings.Join(body, "\n") + "\n"}
			for k := i - 1; k >= 0; k-- {
				if s := strings.TrimSpace(lines[k]); s != "" {
					if m := markerRE.FindStringSubmatch(s); m != nil {
						b.marker = m[1]
					}
					break
				}
			}
			if b.marker == "run: output below" {
				// The next fenced block is what it prints.
				for k := j + 1; k < len(lines); k++ {
					if strings.HasPrefix(strings.TrimSpace(lines[k]), "```") {
						var out []string
						for m := k + 1; m < len(lines) && strings.TrimSpace(lines[m]) != "```"; m++ {
							out = append(out, lines[m])
						}
						b.output = strings.Join(out, "\n")
						break
					}
				}
			}
			blocks = append(blocks, b)
		}
		i = j
	}
	return blocks
}

var digitsRE = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// TestReadmeCommands runs every shell block of the README and of the pages
// under docs/ against the gateway as `make run` starts it (example config,
// dev mode), README.md's first, then the pages' in lexical order, all
// against one gateway: each must succeed with no HTTP error, or be marked
// illustrative (the set-up commands themselves, AWS, Docker). A block
// marked "run: output below" must print what the block after it shows,
// numbers aside; one marked "run: errors expected" runs, and may show an
// error answer. So the documentation cannot drift from what the gateway
// does.
func TestReadmeCommands(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	blocks := readmeShellBlocks(t)
	if len(blocks) < 5 {
		t.Fatalf("found %d shell blocks in README.md and docs/", len(blocks))
	}
	// As make run starts it: no master key (dev mode), the example config.
	const masterKey = ""
	bin := buildFunction(t, "gateway")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	example, _ := filepath.Abs("../functions/gateway/tollgate.example.yaml")
	var logs bytes.Buffer
	gw := exec.Command(bin)
	gw.Dir = t.TempDir()
	gw.Env = append(os.Environ(), "PORT="+port, "TOLLGATE_CONFIG="+example, "TOLLGATE_MASTER_KEY="+masterKey,
		"TOLLGATE_STORE=memory", "OPENAI_API_KEY=", "ANTHROPIC_API_KEY=", "GEMINI_API_KEY=")
	gw.Stdout, gw.Stderr = &logs, &logs
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = gw.Process.Kill()
		_ = gw.Wait()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	ran := 0
	for _, b := range blocks {
		if strings.HasPrefix(b.marker, "illustrative") {
			continue
		}
		ran++
		script := strings.ReplaceAll(b.script, "127.0.0.1:8080", addr)
		// "run: errors expected" runs a block that shows an error answer.
		check := b.marker != "run: output below" && b.marker != "run: errors expected"
		prelude := "set -uo pipefail\n"
		if check {
			// Any HTTP error fails the block.
			prelude = "set -euo pipefail\ncurl() { command curl --show-error --fail-with-body \"$@\"; }\n"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", prelude+script)
		cmd.Env = append(os.Environ(), "TOLLGATE_MASTER_KEY="+masterKey)
		cmd.Dir = t.TempDir()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Errorf("%s:%d: the block failed (%v); mark it <!-- illustrative: why --> if it cannot run here\n%s\nstdout:\n%s\nstderr:\n%s",
				b.file, b.line, err, b.script, stdout.String(), stderr.String())
			continue
		}
		if b.marker == "run: output below" {
			got := digitsRE.ReplaceAllString(strings.TrimSpace(strings.ReplaceAll(stdout.String(), "\r", "")), "N")
			want := digitsRE.ReplaceAllString(strings.TrimSpace(b.output), "N")
			if got != want {
				t.Errorf("%s:%d prints, numbers aside:\n%s\nbut the page shows:\n%s", b.file, b.line, stdout.String(), b.output)
			}
		}
	}
	if ran == 0 {
		t.Fatal("no README or docs block was run")
	}
}
