package tests

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/providers"
	anthropicp "github.com/tollgate/tollgate/providers/anthropic"
	openaip "github.com/tollgate/tollgate/providers/openai"
)

func post(t *testing.T, url, ctype, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// Malformed or incomplete requests on every route get the route's own
// error shape, and nothing reaches the upstream.
func TestBadInputEveryRoute(t *testing.T) {
	up := newCountingMock("mock")
	g := newSDKGateway(t, []providers.Provider{up}, nil)
	const js = "application/json"
	tests := []struct {
		name, path, ctype, body string
		status                  int
		shape                   string // openai, anthropic, gemini
		want                    string
	}{
		{"responses without input", "/v1/responses", js, `{"model":"m"}`, 400, "openai", "input is required"},
		{"responses bad json", "/v1/responses", js, `{"model":`, 400, "openai", "invalid JSON body"},
		{"embeddings bad input", "/v1/embeddings", js, `{"model":"m","input":{}}`, 400, "openai", "input must be"},
		{"embeddings no model", "/v1/embeddings", js, `{"input":"x"}`, 400, "openai", "you must provide a model parameter"},
		{"messages no max_tokens", "/v1/messages", js, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 400, "anthropic", "max_tokens: field required"},
		{"messages no model", "/v1/messages", js, `{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, 400, "anthropic", "model: field required"},
		{"messages bad json", "/v1/messages", js, `nope`, 400, "anthropic", "invalid JSON body"},
		{"messages wrong type", "/v1/messages", "text/plain", `{}`, 415, "anthropic", "unsupported Content-Type"},
		{"gemini no contents", "/v1beta/models/g:generateContent", js, `{}`, 400, "gemini", "contents is not specified"},
		{"gemini bad method", "/v1beta/models/g:explode", js, `{}`, 404, "gemini", "unknown method"},
		{"audio no model", "/v1/audio/speech", js, `{"input":"hi"}`, 400, "openai", "you must provide a model parameter"},
		{"batches incomplete", "/v1/batches", js, `{"endpoint":"/v1/chat/completions"}`, 400, "openai", "input_file_id and endpoint are required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := post(t, g.URL+tc.path, tc.ctype, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			checkShape(t, tc.shape, body, tc.want)
		})
	}
	if up.calls.Load() != 0 {
		t.Fatalf("bad input reached the upstream %d times", up.calls.Load())
	}
}

// checkShape checks an error body is in the protocol's own shape.
func checkShape(t *testing.T, shape string, body []byte, want string) {
	t.Helper()
	switch shape {
	case "anthropic":
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Type != "error" || e.Error.Type == "" || !strings.Contains(e.Error.Message, want) {
			t.Fatalf("not an Anthropic error with %q: %s", want, body)
		}
	case "gemini":
		var e struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Status  string `json:"status"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error.Code == 0 || e.Error.Status == "" || !strings.Contains(e.Error.Message, want) {
			t.Fatalf("not a Gemini error with %q: %s", want, body)
		}
	default:
		var e struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error.Type == "" || !strings.Contains(e.Error.Message, want) {
			t.Fatalf("not an OpenAI error with %q: %s", want, body)
		}
	}
}

// Unknown models are 404 in each protocol's shape.
func TestUnknownModel404(t *testing.T) {
	up, err := openaip.New(openaip.Config{Name: "openai", BaseURL: "http://127.0.0.1:1/v1", Models: []string{"gpt-4o"}})
	if err != nil {
		t.Fatal(err)
	}
	g := newSDKGateway(t, []providers.Provider{up}, nil)
	for _, c := range []struct{ path, body, shape string }{
		{"/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, "openai"},
		{"/v1/messages", `{"model":"claude-9","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "anthropic"},
		{"/v1beta/models/gemini-9:generateContent", `{"contents":[{"parts":[{"text":"x"}]}]}`, "gemini"},
	} {
		status, _, body := post(t, g.URL+c.path, "application/json", c.body)
		if status != 404 {
			t.Fatalf("%s: status %d %s", c.path, status, body)
		}
		checkShape(t, c.shape, body, "does not exist")
	}
}

// /v1/models lists aliases and each provider's models.
func TestModelsList(t *testing.T) {
	a, _ := openaip.New(openaip.Config{Name: "openai", BaseURL: "http://127.0.0.1:1/v1", Models: []string{"gpt-4o"}})
	g := newSDKGateway(t, []providers.Provider{a}, []providers.Alias{{Name: "smart", Targets: []providers.AliasTarget{{Target: "openai/gpt-4o"}}}})
	resp, err := http.Get(g.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID+"@"+m.OwnedBy)
	}
	if got := strings.Join(ids, ","); got != "smart@tollgate,gpt-4o@openai,openai/gpt-4o@openai" {
		t.Fatalf("models %s", got)
	}
}

// Audio transcriptions are multipart uploads: the model field is rewritten
// to the target's and the file passes through; batches and passthrough
// reach the provider as sent.
func TestAudioBatchesPassthrough(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/audio/transcriptions":
			_, _ = io.WriteString(w, `{"text":"hello","usage":{"type":"tokens","input_tokens":14,"output_tokens":2,"total_tokens":16}}`)
		case "/v1/batches":
			_, _ = io.WriteString(w, `{"id":"batch_abc","object":"batch","status":"validating"}`)
		default:
			_, _ = io.WriteString(w, `{"data":[],"object":"list"}`)
		}
	})
	p, err := openaip.New(openaip.Config{Name: "openai", BaseURL: up.URL + "/v1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	g := newSDKGateway(t, []providers.Provider{p}, []providers.Alias{{Name: "whisper", Targets: []providers.AliasTarget{{Target: "openai/whisper-1"}}}})

	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("model", "whisper")
	fw, _ := mw.CreateFormFile("file", "hello.wav")
	_, _ = fw.Write([]byte("RIFF....WAVEfmt fake audio"))
	mw.Close()
	status, _, body := post(t, g.URL+"/v1/audio/transcriptions", mw.FormDataContentType(), form.String())
	if status != 200 || !strings.Contains(string(body), `"text":"hello"`) {
		t.Fatalf("transcription %d %s", status, body)
	}
	sent := up.last(t)
	if !bytes.Contains(sent.Body, []byte("whisper-1")) || !bytes.Contains(sent.Body, []byte("fake audio")) {
		t.Fatalf("upstream form %q", sent.Body)
	}
	wantUsage(t, g.lastUsage(t, 1), 14, 2, 0)

	status, _, body = post(t, g.URL+"/v1/batches", "application/json",
		`{"input_file_id":"file-abc","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
	if status != 200 || !strings.Contains(string(body), "batch_abc") || up.last(t).Path != "/v1/batches" {
		t.Fatalf("batch %d %s", status, body)
	}

	req, _ := http.NewRequest("GET", g.URL+"/p/openai/files?purpose=batch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || up.last(t).Path != "/v1/files" || up.last(t).RawQuery != "purpose=batch" || up.last(t).Method != "GET" {
		t.Fatalf("passthrough %d %+v", resp.StatusCode, up.last(t))
	}
}

// Anthropic's passthrough sends the provider's key and no body on a GET,
// relays an answer larger than the MiB kept for reading usage whole, and
// records the usage of a JSON answer that reports one.
func TestAnthropicPassthrough(t *testing.T) {
	big := strings.Repeat("x", 3<<20)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/messages/count_tokens":
			_, _ = io.WriteString(w, `{"input_tokens":12,"usage":{"input_tokens":12,"output_tokens":0}}`)
		default:
			_, _ = io.WriteString(w, `{"data":[],"pad":"`+big+`"}`)
		}
	})
	p, err := anthropicp.New(anthropicp.Config{Name: "anthropic", BaseURL: up.URL, APIKey: "sk-ant-upstream"})
	if err != nil {
		t.Fatal(err)
	}
	g := newSDKGateway(t, []providers.Provider{p}, nil)

	status, _, body := post(t, g.URL+"/p/anthropic/v1/messages/count_tokens", "application/json",
		`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"Hello"}]}`)
	sent := up.last(t)
	if status != 200 || !strings.Contains(string(body), `"input_tokens":12`) ||
		sent.Path != "/v1/messages/count_tokens" || sent.Header.Get("X-Api-Key") != "sk-ant-upstream" {
		t.Fatalf("count_tokens %d %s, upstream %+v", status, body, sent)
	}
	wantUsage(t, g.lastUsage(t, 1), 12, 0, 0)

	resp, err := http.Get(g.URL + "/p/anthropic/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(got) != len(big)+len(`{"data":[],"pad":""}`) || up.last(t).Method != "GET" || len(up.last(t).Body) != 0 {
		t.Fatalf("models: %d, %d bytes, upstream %s with %d bytes", resp.StatusCode, len(got), up.last(t).Method, len(up.last(t).Body))
	}
}
