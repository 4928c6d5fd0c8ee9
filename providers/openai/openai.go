// Package openai is the adapter for OpenAI's API and everything that
// speaks it: Azure OpenAI (deployment URLs, api-version, api-key header)
// and any OpenAI-compatible server (vLLM, Ollama, LM Studio, …).
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/jsonx"
	"github.com/tollgate/tollgate/providers/sse"
)

// Config configures one OpenAI-style provider instance.
type Config struct {
	Name    string
	BaseURL string // e.g. https://api.openai.com/v1, http://127.0.0.1:8000/v1
	APIKey  string // may be empty for local servers
	// Models the instance serves, for /v1/models and resolving bare ids;
	// empty means it accepts any model id.
	Models []string
	// Azure, when set, builds Azure OpenAI URLs and authenticates with the
	// api-key header.
	Azure *Azure
	// Timeout bounds the wait for response headers (default 5 minutes).
	Timeout time.Duration
	Client  *http.Client
}

// Azure is what Azure OpenAI needs beyond the base URL
// (https://<resource>.openai.azure.com).
type Azure struct {
	APIVersion string
	// Deployments maps model ids to deployment names; a model with no entry
	// is its own deployment name.
	Deployments map[string]string
}

// Provider is an OpenAI-style provider.
type Provider struct {
	cfg    Config
	client *http.Client
	auth   credential
	urls   providers.URLCache
}

var _ providers.Provider = (*Provider)(nil)

// New returns a Provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Name == "" || cfg.BaseURL == "" {
		return nil, errors.New("openai: name and base URL are required")
	}
	if _, err := url.Parse(cfg.BaseURL); err != nil {
		return nil, fmt.Errorf("openai: base URL: %w", err)
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.Azure != nil && cfg.Azure.APIVersion == "" {
		cfg.Azure.APIVersion = "2024-10-21"
	}
	c := cfg.Client
	if c == nil {
		c = providers.NewHTTPClient(cfg.Timeout)
	}
	return &Provider{cfg: cfg, client: c, auth: credentialOf(cfg)}, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return p.cfg.Name }

// Models implements providers.ModelLister.
func (p *Provider) Models() []string { return p.cfg.Models }

// AcceptsAnyModel implements providers.AnyModel.
func (p *Provider) AcceptsAnyModel() bool { return len(p.cfg.Models) == 0 }

// endpoint returns the URL of an operation's path ("/chat/completions"),
// as the two strings it is joined from.
func (p *Provider) endpoint(model, path string) (string, string) {
	if az := p.cfg.Azure; az != nil {
		dep := model
		if d, ok := az.Deployments[model]; ok {
			dep = d
		}
		return p.cfg.BaseURL + "/openai/deployments/" + url.PathEscape(dep) + path + "?api-version=" + url.QueryEscape(az.APIVersion), ""
	}
	return p.cfg.BaseURL, path
}

// authorize sets the provider's credential on req: the value built once,
// shared by every request (a slice of one, which an Add would copy).
func (p *Provider) authorize(req *http.Request) {
	if p.auth.name != "" {
		req.Header[p.auth.name] = p.auth.value
	}
}

// credential is the header a provider's key is sent in.
type credential struct {
	name  string
	value []string
}

// credentialOf is the header cfg's key goes in: Azure's Api-Key, else a
// bearer token; none without a key.
func credentialOf(cfg Config) credential {
	switch {
	case cfg.APIKey == "":
		return credential{}
	case cfg.Azure != nil:
		return credential{"Api-Key", []string{cfg.APIKey}}
	}
	return credential{"Authorization", []string{"Bearer " + cfg.APIKey}}
}

// request sends one upstream request to u with the provider's credentials.
func (p *Provider) request(ctx context.Context, method, u string, body []byte, r *providers.Request) (*http.Response, *providers.Error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	return p.requestTo(ctx, method, parsed, body, r)
}

// call is request to an operation's URL, base + path (endpoint), parsed
// once for all the requests to it: the adapter's own URLs, never one a
// client names (the cache keeps the first it is given).
func (p *Provider) call(ctx context.Context, method, base, path string, body []byte, r *providers.Request) (*http.Response, *providers.Error) {
	parsed, err := p.urls.Parse(base, path)
	if err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	return p.requestTo(ctx, method, parsed, body, r)
}

func (p *Provider) requestTo(ctx context.Context, method string, parsed *url.URL, body []byte, r *providers.Request) (*http.Response, *providers.Error) {
	req, err := providers.NewRequestTo(ctx, method, parsed, body, r.Header)
	if err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	p.authorize(req)
	return providers.Send(p.client, p.cfg.Name, req)
}

// Serve implements providers.Provider.
func (p *Provider) Serve(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	switch r.Op {
	case providers.OpChat:
		return p.chat(ctx, w, r)
	case providers.OpResponses:
		return p.json(ctx, w, r, "/responses", responsesUsage, responsesStream)
	case providers.OpEmbeddings:
		return p.json(ctx, w, r, "/embeddings", chatUsage, nil)
	case providers.OpBatches:
		return p.raw(ctx, w, r, http.MethodPost, p.cfg.BaseURL+"/batches", r.Body)
	case providers.OpAudio:
		return p.audio(ctx, w, r)
	case providers.OpRealtime:
		// The body goes as it is (the model is inside "session" for
		// client_secrets); the ephemeral secret comes back untouched.
		u := p.cfg.BaseURL + strings.TrimPrefix(r.Path, "/v1")
		if az := p.cfg.Azure; az != nil {
			u = p.cfg.BaseURL + "/openai" + r.Path + "?api-version=" + url.QueryEscape(az.APIVersion)
		}
		return p.raw(ctx, w, r, http.MethodPost, u, r.Body)
	case providers.OpPassthrough:
		u := p.cfg.BaseURL + r.Path
		if r.Query != "" {
			u += "?" + r.Query
		}
		return p.raw(ctx, w, r, r.Method, u, r.Body)
	}
	return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest,
		Err: fmt.Errorf("%s: %w", r.Op, providers.ErrUnsupported)}
}

// chat sends a chat completion. For streams it asks for the usage chunk
// (stream_options.include_usage) and hides it from a client that did not
// ask for it.
func (p *Provider) chat(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	if !r.Stream {
		return p.send(ctx, w, r, "/chat/completions", nil, chatUsage, nil)
	}
	// What the client asked of stream_options is read as the member is
	// set, in the one pass over the body that sets it; kept beside what
	// the relay learns of the chunks (one variable, not two).
	var st struct {
		seen             chunkStart
		clientWantsUsage bool
	}
	usage := jsonx.KV{Key: "stream_options", Edit: func(so []byte) []byte {
		so, st.clientWantsUsage = withUsage(so)
		return so
	}}
	return p.send(ctx, w, r, "/chat/completions", []jsonx.KV{usage}, chatUsage, &streamSight{
		keep: func(ev sse.Event, res *providers.Result) bool {
			return chatStream(ev, res, st.clientWantsUsage, &st.seen)
		},
		run: func(b []byte, res *providers.Result) int {
			return plainChunks(b, res, &st.seen)
		},
	})
}

// withUsage returns a request's stream_options (so, nil when it has none)
// with include_usage set, its other members kept byte for byte (an absent
// or malformed one is replaced), and whether the client asked for usage
// itself.
func withUsage(so []byte) ([]byte, bool) {
	if so != nil {
		if set, err := jsonx.Set(so, jsonx.KV{Key: "include_usage", Value: jsonTrue}); err == nil {
			v, _ := jsonx.Member(so, "include_usage")
			return set, string(v) == "true"
		}
	}
	return onlyUsage, false
}

// jsonTrue and onlyUsage are values set in bodies, never written to: Set
// copies them.
var (
	jsonTrue  = []byte("true")
	onlyUsage = []byte(`{"include_usage":true}`)
)

// json sends a JSON operation with the model set to the target's.
func (p *Provider) json(ctx context.Context, w http.ResponseWriter, r *providers.Request, path string,
	usage func([]byte) (providers.Usage, bool), keep func(sse.Event, *providers.Result) bool) (providers.Result, error) {
	var stream *streamSight
	if keep != nil {
		stream = &streamSight{keep: keep}
	}
	return p.send(ctx, w, r, path, nil, usage, stream)
}

// streamSight is how a relay looks at a stream: keep sees each event,
// records usage in the result, and says whether to pass it on; run, when
// set, is the length of the run of whole events at the start of what the
// relay has read that need no look one by one (their output counted in
// the result), passed on as they arrived.
type streamSight struct {
	keep func(sse.Event, *providers.Result) bool
	run  func(buffered []byte, res *providers.Result) int
}

func (p *Provider) send(ctx context.Context, w http.ResponseWriter, r *providers.Request, path string, set []jsonx.KV,
	usage func([]byte) (providers.Usage, bool), stream *streamSight) (providers.Result, error) {
	body, err := providers.WithModel(r.Body, r.Model, r.Once, set...)
	if err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Err: err}
	}
	base, path := p.endpoint(r.Model, path)
	resp, perr := p.call(ctx, http.MethodPost, base, path, body, r)
	if perr != nil {
		return providers.Result{}, perr
	}
	defer resp.Body.Close()
	res := providers.Answered(resp)
	providers.CopyHeaders(w, resp)
	if r.Stream && stream != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return relay(w, resp, res, stream)
	}
	b, err := providers.ReadAnswer(resp, providers.MaxAnswerBytes)
	if err != nil {
		return res, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	res.Usage, res.Usage.Reported = usage(b)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
	return res, nil
}

// relay passes an event stream through: a run of events that need no look
// as it arrived (streamSight.run), the others event by event.
func relay(w http.ResponseWriter, resp *http.Response, res providers.Result, sight *streamSight) (providers.Result, error) {
	sse.Header(w, resp.StatusCode)
	sw := sse.NewWriter(w)
	rd := sse.NewReader(resp.Body)
	rd.RelayTo(sw)
	defer rd.Close()
	for {
		if sight.run != nil {
			b := rd.Buffered()
			if len(b) == 0 && rd.Fill() == nil {
				continue // what arrives is looked at as a run first
			}
			if n := sight.run(b, &res); n > 0 {
				if err := sw.Relay(rd.Take(n)); err != nil {
					res.Usage.Reported = false
					return res, nil
				}
				continue
			}
		}
		ev, err := rd.Next()
		if err != nil {
			// io.EOF is the end; anything else (the client left, the
			// upstream broke) ends the stream with what was counted.
			if sw.Err() != nil {
				res.Usage.Reported = false // the client did not get it all
			}
			return res, nil
		}
		if !sight.keep(ev, &res) {
			continue
		}
		if err := sw.Relay(ev.Raw); err != nil {
			res.Usage.Reported = false
			return res, nil
		}
	}
}

// raw passes a request and its answer through unchanged (batches,
// passthrough). A JSON answer with a usage block reports it.
func (p *Provider) raw(ctx context.Context, w http.ResponseWriter, r *providers.Request, method, u string, body []byte) (providers.Result, error) {
	if method == "" {
		method = http.MethodPost
	}
	resp, perr := p.request(ctx, method, u, body, r)
	if perr != nil {
		return providers.Result{}, perr
	}
	defer resp.Body.Close()
	res := providers.Answered(resp)
	providers.CopyHeaders(w, resp)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return relay(w, resp, res, &streamSight{keep: func(ev sse.Event, res *providers.Result) bool {
			if u, ok := chatUsage(ev.Data); ok {
				res.Usage = u
				res.Usage.Reported = true
			}
			return true
		}})
	}
	answer := providers.Pass(w, resp)
	res.Usage, res.Usage.Reported = headUsage(answer)
	if r.Op == providers.OpRealtime && res.Status/100 == 2 {
		res.SessionID = providers.RealtimeSessionID(answer)
	}
	if r.Op == providers.OpBatches && res.Status/100 == 2 {
		if id, ok := jsonx.Member(answer, "id"); ok {
			_ = json.Unmarshal(id, &res.BatchID)
		}
	}
	return res, nil
}

// Supports implements providers.Supporter: every OpenAI operation.
func (p *Provider) Supports(op providers.Op) bool {
	switch op {
	case providers.OpChat, providers.OpResponses, providers.OpEmbeddings, providers.OpAudio,
		providers.OpBatches, providers.OpPassthrough, providers.OpRealtime:
		return true
	}
	return false
}
