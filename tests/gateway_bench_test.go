package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	openaip "github.com/tollgate/tollgate/providers/openai"
	"github.com/tollgate/tollgate/providers/sse"
	"github.com/tollgate/tollgate/providers/tokens"
)

// Gateway overhead: each iteration sends the same request once straight
// to an httptest upstream and once through the gateway handler (embedded
// store, three matching rules, the offline tokenizer) to that upstream.
// Interleaving the two puts the machine's noise on both alike. Reported:
//
//	overhead-p50-µs, overhead-p99-µs  gateway latency − direct latency
//	direct-p50-µs, gateway-p50-µs     the two distributions
//
// BenchmarkGatewayAllocs/{direct,gateway} give allocations per request of
// each path alone; their difference is the gateway's.

var benchRules = []limiter.Rule{
	{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1 << 40, MaxTokens: 1 << 40}},
	{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Gauge{MaxInFlight: 1 << 20}},
	{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1 << 40}},
}

type benchGateway struct {
	h        http.Handler
	upstream *httptest.Server
	store    *memstore.Store
}

func newBenchGateway(b *testing.B, serve http.HandlerFunc) *benchGateway {
	up := httptest.NewServer(serve)
	b.Cleanup(up.Close)
	p, err := openaip.New(openaip.Config{Name: "openai", BaseURL: up.URL + "/v1", APIKey: "k"})
	if err != nil {
		b.Fatal(err)
	}
	store := memstore.New()
	rs, _ := limiter.NewRules(benchRules)
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	cat, _ := providers.NewCatalog([]providers.Provider{p}, nil, nil)
	h, err := proxy.New(proxy.Config{Limiter: l, Catalog: cat, Estimator: tokens.BPE{}})
	if err != nil {
		b.Fatal(err)
	}
	return &benchGateway{h: h, upstream: up, store: store}
}

const benchChat = `{"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in five words."}],"max_tokens":32}`
const benchStream = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":32}`

func direct(b *testing.B, url, body string) {
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func viaGateway(b *testing.B, h http.Handler, body string) {
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		b.Fatalf("gateway status %d: %s", w.Code, w.Body)
	}
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func benchmarkOverhead(b *testing.B, serve http.HandlerFunc, body string) {
	g := newBenchGateway(b, serve)
	// Warm both paths (connections, tokenizer, first window).
	for range 20 {
		direct(b, g.upstream.URL, body)
		viaGateway(b, g.h, body)
	}
	var d, gw []time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		direct(b, g.upstream.URL, body)
		d = append(d, time.Since(start))
		start = time.Now()
		viaGateway(b, g.h, body)
		gw = append(gw, time.Since(start))
		if i++; i%4096 == 0 {
			g.store.Trim(1 << 62) // what the reconciler does as it goes
		}
	}
	b.ReportMetric(us(pct(d, 0.5)), "direct-p50-µs")
	b.ReportMetric(us(pct(gw, 0.5)), "gateway-p50-µs")
	b.ReportMetric(us(pct(gw, 0.5)-pct(d, 0.5)), "overhead-p50-µs")
	b.ReportMetric(us(pct(gw, 0.99)-pct(d, 0.99)), "overhead-p99-µs")
}

func chatUpstream(b *testing.B) http.HandlerFunc { return replay(b, "openai_chat.json", 200) }

func streamUpstream(b *testing.B) http.HandlerFunc { return replaySSE(b, "openai_chat_stream.sse", 0) }

// BenchmarkGatewayOverhead measures the gateway's added latency for a
// non-streaming and a streaming (10-event) chat completion.
func BenchmarkGatewayOverhead(b *testing.B) {
	b.Run("chat", func(b *testing.B) { benchmarkOverhead(b, chatUpstream(b), benchChat) })
	b.Run("stream", func(b *testing.B) { benchmarkOverhead(b, streamUpstream(b), benchStream) })
}

// BenchmarkGatewayAllocs reports allocations per request of each path.
func BenchmarkGatewayAllocs(b *testing.B) {
	for _, c := range []struct {
		name  string
		serve func(*testing.B) http.HandlerFunc
		body  string
	}{{"chat", chatUpstream, benchChat}, {"stream", streamUpstream, benchStream}} {
		b.Run(c.name+"/direct", func(b *testing.B) {
			g := newBenchGateway(b, c.serve(b))
			b.ReportAllocs()
			for b.Loop() {
				direct(b, g.upstream.URL, c.body)
			}
		})
		b.Run(c.name+"/reverseproxy", func(b *testing.B) {
			g := newBenchGateway(b, c.serve(b))
			target, _ := url.Parse(g.upstream.URL)
			rp := httputil.NewSingleHostReverseProxy(target)
			rp.FlushInterval = -1
			b.ReportAllocs()
			for b.Loop() {
				viaReverseProxy(b, rp, c.body)
			}
		})
		b.Run(c.name+"/gateway", func(b *testing.B) {
			g := newBenchGateway(b, c.serve(b))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				viaGateway(b, g.h, c.body)
				if i++; i%4096 == 0 {
					g.store.Trim(1 << 62)
				}
			}
		})
	}
}

// BenchmarkStreamThroughput relays a stream of 2,000 chunks sent as fast
// as the upstream can, straight and through the gateway (served over
// HTTP), and reports chunks per second.
func BenchmarkStreamThroughput(b *testing.B) {
	const n = 2000
	var ev strings.Builder
	for i := range n {
		fmt.Fprintf(&ev, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"tok%d"},"finish_reason":null}],"usage":null}`+"\n\n", i)
	}
	ev.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2000,"total_tokens":2010}}` + "\n\ndata: [DONE]\n\n")
	events := splitEvents([]byte(ev.String()))
	serve := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, e := range events {
			_, _ = w.Write(e)
			_ = rc.Flush()
		}
	}
	for _, path := range []string{"direct", "gateway"} {
		b.Run(path, func(b *testing.B) {
			g := newBenchGateway(b, serve)
			url := g.upstream.URL
			if path == "gateway" {
				srv := httptest.NewServer(g.h)
				b.Cleanup(srv.Close)
				url = srv.URL
			}
			chunks := 0
			var total time.Duration
			for b.Loop() {
				start := time.Now()
				req, _ := http.NewRequestWithContext(context.Background(), "POST", url+"/v1/chat/completions", strings.NewReader(benchStream))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				rd := sse.NewReader(resp.Body)
				for {
					if _, err := rd.Next(); err != nil {
						break
					}
					chunks++
				}
				resp.Body.Close()
				total += time.Since(start)
			}
			b.ReportMetric(float64(chunks)/total.Seconds(), "chunks/s")
		})
	}
}

// viaReverseProxy sends the request through a bare httputil.ReverseProxy
// to the same upstream: what forwarding alone costs, with no admission,
// parsing or usage.
func viaReverseProxy(b *testing.B, h http.Handler, body string) {
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		b.Fatalf("reverse proxy status %d", w.Code)
	}
}

// BenchmarkGatewayVsReverseProxy puts the gateway's overhead (gateway −
// direct) beside a bare httputil.ReverseProxy's (proxy − direct), the
// three interleaved in one run over the same TCP upstream, the gateway
// and the proxy taking turns at following the direct call. ratio-p50 is
// the first over the second: at most 1 means the gateway's admission,
// parsing and usage capture cost no more than forwarding alone.
func BenchmarkGatewayVsReverseProxy(b *testing.B) {
	for _, c := range []struct {
		name  string
		serve func(*testing.B) http.HandlerFunc
		body  string
	}{{"chat", chatUpstream, benchChat}, {"stream", streamUpstream, benchStream}} {
		b.Run(c.name, func(b *testing.B) {
			g := newBenchGateway(b, c.serve(b))
			target, _ := url.Parse(g.upstream.URL)
			rp := httputil.NewSingleHostReverseProxy(target)
			rp.FlushInterval = -1
			// Its own connections, as the gateway has its own: the direct
			// calls' are the application's.
			tr := http.DefaultTransport.(*http.Transport).Clone()
			b.Cleanup(tr.CloseIdleConnections)
			rp.Transport = tr
			for range 20 {
				direct(b, g.upstream.URL, c.body)
				viaGateway(b, g.h, c.body)
				viaReverseProxy(b, rp, c.body)
			}
			var d, gw, p []time.Duration
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				direct(b, g.upstream.URL, c.body)
				d = append(d, time.Since(start))
				// Which path follows the direct call alternates: the one
				// that goes first after it runs measurably differently
				// (docs/benchmarks.md), and neither may have that place
				// for itself.
				for k := range 2 {
					start = time.Now()
					if k == i%2 {
						viaGateway(b, g.h, c.body)
						gw = append(gw, time.Since(start))
					} else {
						viaReverseProxy(b, rp, c.body)
						p = append(p, time.Since(start))
					}
				}
				if i++; i%4096 == 0 {
					g.store.Trim(1 << 62)
				}
			}
			og, op := pct(gw, 0.5)-pct(d, 0.5), pct(p, 0.5)-pct(d, 0.5)
			b.ReportMetric(us(og), "gateway-overhead-p50-µs")
			b.ReportMetric(us(op), "proxy-overhead-p50-µs")
			b.ReportMetric(float64(og)/float64(max(op, 1)), "ratio-p50")
		})
	}
}
