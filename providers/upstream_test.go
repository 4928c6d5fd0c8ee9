package providers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tollgate/tollgate/providers/jsonx"
)

// ReadAnswer reads a body of the declared length into one buffer, and
// tells a body that ends early, runs long or exceeds the bound just as
// ReadAll would.
func TestReadAnswer(t *testing.T) {
	answer := func(declared int64, body io.Reader) *http.Response {
		return &http.Response{ContentLength: declared, Body: io.NopCloser(body)}
	}
	for _, c := range []struct {
		name     string
		declared int64
		body     io.Reader
		max      int64
		want     string
		err      bool
	}{
		{"as declared", 5, strings.NewReader("hello"), 100, "hello", false},
		{"in pieces", 5, iotest.OneByteReader(strings.NewReader("hello")), 100, "hello", false},
		{"empty", 0, strings.NewReader(""), 100, "", false},
		{"undeclared", -1, strings.NewReader("hello"), 100, "hello", false},
		{"shorter than declared", 9, strings.NewReader("hello"), 100, "", true},
		{"longer than declared", 2, strings.NewReader("hello"), 100, "hello", false},
		{"longer than the bound", 2, strings.NewReader("hello"), 4, "", true},
		{"declared over the bound", 5, strings.NewReader("hello"), 4, "", true},
		{"a read error", 5, iotest.ErrReader(errors.New("reset")), 100, "", true},
	} {
		got, err := ReadAnswer(answer(c.declared, c.body), c.max)
		if (err != nil) != c.err || string(got) != c.want {
			t.Errorf("%s: %q, %v; want %q (error %v)", c.name, got, err, c.want, c.err)
		}
	}
}

// Send sends what client.Do would: a redirect followed with the body
// again, whether the transport is called straight or through a client
// with a redirect policy of its own, and a URL's user and password as
// basic authentication.
func TestSendFollowsRedirects(t *testing.T) {
	var got []string
	var auth []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		user, pass, _ := r.BasicAuth()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(body)+" "+user+":"+pass)
		auth = append(auth, r.Header.Get("Authorization"))
		switch r.URL.Path {
		case "/v1/chat":
			http.Redirect(w, r, "/v1/chat/", http.StatusTemporaryRedirect)
		case "/v1/moved":
			http.Redirect(w, r, "/v1/chat/", http.StatusFound)
		}
	}))
	defer up.Close()
	// Another host (by name: the client drops credentials on the way).
	other := strings.Replace(up.URL, "127.0.0.1", "localhost", 1)
	away := httptest.NewServer(http.RedirectHandler(other+"/v1/chat/", http.StatusTemporaryRedirect))
	defer away.Close()

	cached := func(raw string) *http.Request {
		u, _ := url.Parse(raw)
		req, _ := NewRequestTo(context.Background(), http.MethodPost, u, []byte(`{"a":1}`), nil)
		return req
	}
	plain := func(raw string) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, raw, strings.NewReader(`{"a":1}`))
		return req
	}
	for _, c := range []struct {
		name   string
		client *http.Client
		req    *http.Request
		want   []string
	}{
		// Each request reaches where it was sent once, then where it
		// was sent on to: a 307 keeps the method and the body, a 302
		// makes a POST a GET without one.
		{"307", NewHTTPClient(0), plain(up.URL + "/v1/chat"), []string{`POST /v1/chat {"a":1} :`, `POST /v1/chat/ {"a":1} :`}},
		{"307, built by NewRequestTo", NewHTTPClient(0), cached(up.URL + "/v1/chat"), []string{`POST /v1/chat {"a":1} :`, `POST /v1/chat/ {"a":1} :`}},
		{"302", NewHTTPClient(0), cached(up.URL + "/v1/moved"), []string{`POST /v1/moved {"a":1} :`, `GET /v1/chat/  :`}},
		{"through client.Do", &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}, plain(up.URL + "/v1/chat"),
			[]string{`POST /v1/chat {"a":1} :`, `POST /v1/chat/ {"a":1} :`}},
		{"to another host", NewHTTPClient(0), cached(away.URL + "/v1/chat"), []string{`POST /v1/chat/ {"a":1} :`}},
	} {
		got, auth = nil, nil
		c.req.Header.Set("Authorization", "Bearer k")
		resp, perr := Send(c.client, "p", c.req)
		if perr != nil || resp.StatusCode != http.StatusOK || !slices.Equal(got, c.want) {
			t.Fatalf("%s: %v, %+v; upstream saw %q, want %q", c.name, resp, perr, got, c.want)
		}
		if c.name == "to another host" && auth[0] != "" {
			t.Errorf("the credential went on to another host: %q", auth[0])
		} else if c.name != "to another host" && auth[len(auth)-1] != "Bearer k" {
			t.Errorf("%s: the credential was dropped on the same host", c.name)
		}
		resp.Body.Close()
	}
	// A body the client cannot send again: the 307 is the answer, the
	// request sent once.
	got = nil
	once, _ := http.NewRequest(http.MethodPost, up.URL+"/v1/chat", strings.NewReader(`{"a":1}`))
	once.GetBody = nil
	if _, perr := Send(NewHTTPClient(0), "p", once); perr == nil || perr.Status != http.StatusTemporaryRedirect || len(got) != 1 {
		t.Fatalf("a body that cannot be sent again: %+v; upstream saw %q", perr, got)
	}
	// A loop ends at the client's limit, each hop made once: ten
	// requests, the first sent straight.
	hops := 0
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hops++
		http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
	}))
	defer loop.Close()
	if _, perr := Send(NewHTTPClient(0), "p", cached(loop.URL+"/loop")); perr == nil || !strings.Contains(perr.Error(), "stopped after 10 redirects") || hops != 10 {
		t.Fatalf("a redirect loop: %v after %d requests, want the client's limit after 10", perr, hops)
	}

	u, _ := url.Parse(up.URL + "/v1/chat/")
	u.User = url.UserPassword("svc", "secret")
	req, _ := http.NewRequest(http.MethodPost, u.String(), strings.NewReader(`{}`))
	resp, perr := Send(NewHTTPClient(0), "p", req)
	if perr != nil || got[len(got)-1] != "POST /v1/chat/ {} svc:secret" {
		t.Fatalf("basic auth from the URL: %+v; upstream saw %q", perr, got)
	}
	resp.Body.Close()
}

// URLCache hands out copies: a request that changes its URL changes
// nobody else's; past its bound it parses without keeping.
func TestURLCache(t *testing.T) {
	var c URLCache
	a, err := c.Parse("http://127.0.0.1:8080/v1", "/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	a.Host, a.Path = "elsewhere", "/changed"
	b, _ := c.Parse("http://127.0.0.1:8080/v1", "/chat/completions")
	if b.Host != "127.0.0.1:8080" || b.Path != "/v1/chat/completions" {
		t.Fatalf("second parse %v saw the first one's change", b)
	}
	if o, _ := c.Parse("http://127.0.0.1:8080/v1/chat", "/completions"); o.String() != b.String() {
		t.Fatalf("the same URL joined otherwise: %v", o)
	}
	for i := range 2 * maxCachedURLs {
		if _, err := c.Parse("http://h/", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.n.Load(); n != maxCachedURLs {
		t.Fatalf("%d kept, want at most %d", n, maxCachedURLs)
	}
	if _, err := c.Parse("http://[::1", ""); err == nil {
		t.Fatal("a bad URL parsed")
	}
}

// WithModel leaves a body alone exactly when its model is the target's
// as strconv.Quote writes it and JSON reads it the same (isQuoted, which
// makes no string to compare).
func TestIsQuotedIsQuoteCompared(t *testing.T) {
	models := []string{"", "gpt-4o", "a\"b", `a\b`, "é", "\x7f", "tab\t", "<&>", "claude-3-5-sonnet@20240620", "a/b:c"}
	for _, s := range models {
		for _, v := range []string{strconv.Quote(s), `"` + s + `"`, s, `"` + s, `"` + s + `" `, `"x` + s + `"`} {
			want := v == strconv.Quote(s) && plainASCII(s)
			if got := isQuoted([]byte(v), s); got != want {
				t.Errorf("isQuoted(%q, %q) = %v, want %v", v, s, got, want)
			}
		}
	}
	for _, c := range []struct{ body, model, want string }{
		{`{"model":"gpt-4o","n":1}`, "gpt-4o", `{"model":"gpt-4o","n":1}`},
		{`{"model":"gpt-4","n":1}`, "gpt-4o", `{"model":"gpt-4o","n":1}`},
		{`{"model":"gpt\u002d4o"}`, "gpt-4o", `{"model":"gpt-4o"}`},
		{`{"n":1}`, "é", `{"n":1,"model":"é"}`},
	} {
		got, err := WithModel([]byte(c.body), c.model, false)
		if err != nil || string(got) != c.want {
			t.Errorf("WithModel(%s, %q) = %s, %v; want %s", c.body, c.model, got, err, c.want)
		}
	}
}

// The model and the other members are set as one Set of them all would
// set them, however many there are.
func TestWithModelAndMembers(t *testing.T) {
	kv := func(k, v string) jsonx.KV { return jsonx.KV{Key: k, Value: []byte(v)} }
	body := []byte(`{"b":0,"model":"x","d":0}`)
	for n := range 6 {
		set := []jsonx.KV{kv("a", "1"), kv("b", "2"), kv("c", "3"), kv("d", "4"), kv("e", "5")}[:n]
		want, _ := jsonx.Set(body, append([]jsonx.KV{kv("model", `"m"`)}, set...)...)
		got, err := WithModel(body, "m", false, set...)
		if err != nil || string(got) != string(want) {
			t.Errorf("%d members: %s, %v; want %s", n, got, err, want)
		}
	}
}

// newPost makes the request http.NewRequestWithContext makes for a POST:
// the same fields, a body read whole, and GetBody giving it again (as a
// transport does to send it once more on a fresh connection).
func TestNewPostIsNewRequest(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, 1)
	for _, body := range [][]byte{[]byte(`{"model":"m"}`), {}, nil} {
		u, _ := url.Parse("http://example.com:/v1/chat/completions?x=1")
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		want, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), rd)
		if err != nil {
			t.Fatal(err)
		}
		got := newPost(ctx, u, body)
		if got.Method != want.Method || got.URL.String() != want.URL.String() || got.Host != want.Host || got.Proto != want.Proto ||
			got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor || got.ContentLength != want.ContentLength ||
			len(got.Header) != 0 || got.Header == nil || got.Context() != ctx || (got.Body == nil) != (want.Body == nil) ||
			(got.Body == http.NoBody) != (want.Body == http.NoBody) || (got.GetBody == nil) != (want.GetBody == nil) {
			t.Fatalf("body %q: newPost %+v\nNewRequest %+v", body, got, want)
		}
		if got.Body == nil {
			continue
		}
		for i := range 3 {
			rc := got.Body
			if i > 0 {
				if rc, err = got.GetBody(); err != nil {
					t.Fatal(err)
				}
			}
			if b, err := io.ReadAll(rc); err != nil || !bytes.Equal(b, body) {
				t.Fatalf("body %q read %d: %q, %v", body, i, b, err)
			}
		}
	}
}

// A member set by an Edit that keeps what it learns costs no more
// allocations than one set by its value: nothing of set is kept, so the
// edit and its variables stay on the caller's stack (as a stream's
// stream_options does).
func TestWithModelEditAllocatesAsAValue(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"messages":[]}`)
	for _, model := range []string{"m", "other"} {
		byValue := testing.AllocsPerRun(100, func() {
			_, _ = WithModel(body, model, true, jsonx.KV{Key: "stream_options", Value: usageOn})
		})
		byEdit := testing.AllocsPerRun(100, func() {
			var saw bool
			_, _ = WithModel(body, model, true, jsonx.KV{Key: "stream_options", Edit: func(old []byte) []byte {
				saw = old != nil
				return usageOn // as withUsage answers: a value made once
			}})
			_ = saw
		})
		if byEdit != byValue {
			t.Errorf("model %q: %v allocations with an Edit, %v with a value", model, byEdit, byValue)
		}
	}
}

var usageOn = []byte(`{"include_usage":true}`)
