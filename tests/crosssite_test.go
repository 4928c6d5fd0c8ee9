package tests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// crossSiteWrites are what a page of another site tried against a
// dev-mode gateway: a pause on / (every request then 503), a rule, a
// managed key, and a model call on the operator's provider keys.
var crossSiteWrites = []struct{ path, body string }{
	{"/admin/pause", `{"scope":"user_path","subject":"/","reason":"pwned"}`},
	{"/admin/rate-limits", `{"user_path":"/","limit_key":{"period":"minute"},"max_requests":1}`},
	{"/admin/keys", `{"user_path":"/"}`},
	{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`},
}

// nothingWritten fails the test when any of crossSiteWrites took effect:
// a pause, a rule or a key exists, or a request reached a provider.
func nothingWritten(t *testing.T, in *instance) {
	t.Helper()
	for _, c := range []struct{ path, absent string }{
		{"/admin/pauses", "pwned"}, {"/admin/rate-limits", `"user_path:/:minute"`}, {"/admin/keys", `"user_path":"/"`},
	} {
		s, b := in.call(t, "GET", c.path, "", "")
		if s != 200 || strings.Contains(string(b), c.absent) {
			t.Fatalf("GET %s after the page's requests: %d %s", c.path, s, b)
		}
	}
	if strings.Contains(in.logs.String(), `"msg":"request finished"`) {
		t.Fatal("a page of another site called a model through the gateway")
	}
}

// In dev mode (no master key, as `make run` starts it) the gateway and
// its admin API refuse what a browser says comes from a page of another
// origin (Sec-Fetch-Site other than same-origin, or an Origin that is not
// the gateway's), and every JSON route needs Content-Type:
// application/json, which a no-cors fetch cannot send. curl, the SDKs and
// the gateway's own dashboard go as before.
func TestDevModeRefusesOtherSites(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_MASTER_KEY": ""})
	for _, c := range crossSiteWrites {
		for _, hdr := range [][]string{
			{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Origin", "https://evil.example"},
			{"Sec-Fetch-Site", "same-site", "Origin", "http://localhost:3000"}, // another port of localhost
			{"Origin", "https://evil.example"},                                 // a browser without Sec-Fetch-*
		} {
			if s, b := in.call(t, "POST", c.path, "", c.body, hdr...); s != 403 || !strings.Contains(string(b), "another origin") {
				t.Fatalf("POST %s with %v: %d %s, want 403", c.path, hdr, s, b)
			}
		}
		// What a no-cors fetch sends: a body with no Content-Type (or
		// text/plain), no preflight.
		res := in.doRaw(t, "POST", c.path, c.body, "")
		if res.StatusCode != 415 && res.StatusCode != 403 {
			t.Fatalf("POST %s with no Content-Type: %d, want 415", c.path, res.StatusCode)
		}
	}
	nothingWritten(t, in)
	// Not browsers, and the gateway's own pages: as before.
	if s, b := in.call(t, "POST", "/v1/chat/completions", "", crossSiteWrites[3].body); s != 200 {
		t.Fatalf("curl in dev mode: %d %s", s, b)
	}
	if s, b := in.call(t, "GET", "/admin/rate-limits", "", "", "Sec-Fetch-Site", "same-origin"); s != 200 {
		t.Fatalf("the dashboard's own call: %d %s", s, b)
	}
	if s, b := in.call(t, "POST", "/v1/chat/completions", "", crossSiteWrites[3].body, "Origin", in.srv.URL); s != 200 {
		t.Fatalf("a page of the gateway's own origin: %d %s", s, b)
	}
}

// doRaw sends a body with the given Content-Type ("" for none).
func (in *instance) doRaw(t *testing.T, method, path, body, contentType string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, in.srv.URL+path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// The same, in headless Chromium: a page served from another origin
// (localhost against the gateway's 127.0.0.1: another site) fires
// no-cors fetches with bodies and no Content-Type at the dev-mode
// gateway, as the attack did; none of them takes effect.
func TestDevModeRefusesOtherSitesInBrowser(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_MASTER_KEY": ""})
	b := newBrowser(t)
	var script strings.Builder
	script.WriteString("<!doctype html><script>window.results = [];\n")
	for _, c := range crossSiteWrites {
		for _, typed := range []bool{false, true} {
			init := "{method: 'POST', mode: 'no-cors', body: new Blob([%q])}"
			if typed {
				init = "{method: 'POST', mode: 'no-cors', body: %q, headers: {'Content-Type': 'text/plain'}}"
			}
			fmt.Fprintf(&script, "window.results.push(fetch(%q, "+init+").then(() => 'sent', e => 'failed: ' + e));\n", in.srv.URL+c.path, c.body)
		}
	}
	script.WriteString("Promise.all(window.results).then(r => { document.title = 'done ' + r.length; });</script>")
	page := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, script.String())
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	page.Listener = ln
	page.Start()
	t.Cleanup(page.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	b.step(t, "open the attacking page", chromedp.Navigate("http://localhost:"+port+"/"))
	b.until(t, "the page's fetches", `document.title.startsWith('done')`)
	title, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.title`))
	if err != nil {
		t.Fatal(err)
	}
	if title != fmt.Sprintf("done %d", 2*len(crossSiteWrites)) {
		t.Fatalf("the page ran %q", title)
	}
	nothingWritten(t, in)
}
