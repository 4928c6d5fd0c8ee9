package tests

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/config"
)

// Cold start and memory of the gateway binary as a user runs it (the
// local process, embedded store, mock provider), beside a minimal Go HTTP
// server built the same way.

// buildBinary builds a main package for this machine, as `make build`
// does for Lambda (trimmed, no symbols).
func buildBinary(tb testing.TB, pkg string) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

func freeLocalPort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// firstAnswer starts bin and returns how long until it first answers body
// at path with 200, polling as fast as it can, and the process.
func firstAnswer(tb testing.TB, bin, path, body string, env ...string) (time.Duration, *exec.Cmd) {
	tb.Helper()
	port := freeLocalPort(tb)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), append([]string{fmt.Sprintf("PORT=%d", port), "TOLLGATE_CONFIG=", "TOLLGATE_LOG_LEVEL=error"}, env...)...)
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	for time.Since(start) < 20*time.Second {
		var res *http.Response
		var err error
		if body == "" {
			res, err = client.Get(url)
		} else {
			res, err = client.Post(url, "application/json", strings.NewReader(body))
		}
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				return time.Since(start), cmd
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	tb.Fatalf("%s did not answer %s within 20 s", bin, path)
	return 0, nil
}

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

const (
	coldChatGPT4o  = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello there, how are you today?"}],"max_tokens":8}`
	coldChatClaude = `{"model":"claude-sonnet-4","messages":[{"role":"user","content":"Hello there, how are you today?"}],"max_tokens":8}`
)

// BenchmarkColdStart starts each binary 15 times and reports the median
// time from exec to its first answered request: the gateway's first
// gpt-4o chat (the tokenizer), its first chat on a model counted without
// one, and a minimal Go HTTP server's first answer.
func BenchmarkColdStart(b *testing.B) {
	gw := buildBinary(b, "../functions/gateway")
	minimal := buildBinary(b, "./testdata/minimalserver")
	const runs = 15
	var tok, plain, base []time.Duration
	for b.Loop() {
		for range runs {
			d, cmd := firstAnswer(b, gw, "/v1/chat/completions", coldChatGPT4o)
			stop(cmd)
			tok = append(tok, d)
			d, cmd = firstAnswer(b, gw, "/v1/chat/completions", coldChatClaude)
			stop(cmd)
			plain = append(plain, d)
			d, cmd = firstAnswer(b, minimal, "/", "{}")
			stop(cmd)
			base = append(base, d)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(median(tok)), "gpt-4o-first-ms")
	b.ReportMetric(ms(median(plain)), "no-tokenizer-first-ms")
	b.ReportMetric(ms(median(base)), "minimal-server-first-ms")
	b.ReportMetric(float64(median(tok))/float64(median(plain)), "tokenizer-ratio")
	b.ReportMetric(float64(median(tok))/float64(median(base)), "vs-minimal-ratio")
}

// rssKB reads a process's peak and current resident set from /proc.
func rssKB(tb testing.TB, pid int) (peak, now int64) {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Skip("no /proc: ", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmHWM:":
			peak = v
		case "VmRSS:":
			now = v
		}
	}
	return peak, now
}

// mixedLoad is the traffic of the memory benchmarks: both tokenizers,
// a long prompt, a stream, embeddings and an Anthropic message.
var mixedLoad = []struct{ path, body string }{
	{"/v1/chat/completions", coldChatGPT4o},
	{"/v1/chat/completions", `{"model":"gpt-4","messages":[{"role":"user","content":"` + strings.Repeat("Count these words please. ", 200) + `"}],"max_tokens":16}`},
	{"/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Stream me a story"}],"max_tokens":16}`},
	{"/v1/embeddings", `{"model":"text-embedding-3-small","input":["one text","another text to embed"]}`},
	{"/v1/messages", `{"model":"claude-sonnet-4","max_tokens":16,"messages":[{"role":"user","content":"Hello"}]}`},
}

// sendMixedLoad sends 1,000 requests of mixedLoad to url, four clients at
// once, and fails on any answer but 200.
func sendMixedLoad(b *testing.B, url string) {
	client := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for i := range 250 {
				q := mixedLoad[(c+i)%len(mixedLoad)]
				req, _ := http.NewRequest("POST", url+q.path, strings.NewReader(q.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Tollgate-User-Path", "/rss")
				res, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					b.Errorf("%s: status %d", q.path, res.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkPeakRSS runs the gateway binary through 1,000 mixed requests
// and reports its resident memory: after start, and at its peak.
func BenchmarkPeakRSS(b *testing.B) {
	gw := buildBinary(b, "../functions/gateway")
	var startKB, peakKB int64
	for b.Loop() {
		_, cmd := firstAnswer(b, gw, "/healthz", "")
		_, startKB = rssKB(b, cmd.Process.Pid)
		port := cmd.Env[len(os.Environ())] // "PORT=…"
		sendMixedLoad(b, "http://127.0.0.1:"+strings.TrimPrefix(port, "PORT="))
		peakKB, _ = rssKB(b, cmd.Process.Pid)
		stop(cmd)
	}
	b.ReportMetric(float64(startKB)/1024, "start-RSS-MB")
	b.ReportMetric(float64(peakKB)/1024, "peak-RSS-MB")
}

// BenchmarkHeapAfterLoad runs the same application in this process through
// the same 1,000 requests and reports the live heap after a collection;
// with TOLLGATE_HEAP_PROFILE=file it writes that heap's profile for
// `go tool pprof -sample_index=inuse_space -top file` (docs/benchmarks.md).
func BenchmarkHeapAfterLoad(b *testing.B) {
	var inuse uint64
	if os.Getenv("TOLLGATE_HEAP_PROFILE") != "" {
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 512 // every allocation of the load is sampled
	}
	for b.Loop() {
		a, err := app.New(context.Background(), config.Env{"TOLLGATE_STORE": "memory", "TOLLGATE_CONFIG": ""}, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		if err := a.BuildGateway(); err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(a.LocalHandler())
		sendMixedLoad(b, srv.URL)
		srv.Close()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		inuse = ms.HeapInuse
		if path := os.Getenv("TOLLGATE_HEAP_PROFILE"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.WriteHeapProfile(f); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
		runtime.KeepAlive(a)
		a.Close()
	}
	b.ReportMetric(float64(inuse)/(1<<20), "heap-inuse-MB")
}
