package providers

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
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

// Send follows no redirect, whether it calls the transport straight or a
// client with a redirect policy of its own.
func TestSendFollowsNoRedirect(t *testing.T) {
	followed := false
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed = true
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer up.Close()
	for _, client := range []*http.Client{
		NewHTTPClient(0),
		{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }},
	} {
		req, _ := http.NewRequest(http.MethodPost, up.URL+"/v1/chat", strings.NewReader("{}"))
		resp, perr := Send(client, "p", req)
		if resp != nil || perr == nil || perr.Status != http.StatusTemporaryRedirect || followed {
			t.Fatalf("redirect: response %v, error %+v, followed %v; want the 307 as the upstream's error", resp, perr, followed)
		}
	}
}
