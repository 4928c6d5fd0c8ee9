// Package anthropic is the adapter for Anthropic's Messages API: native
// /v1/messages calls pass through, and OpenAI chat completions are
// translated to Messages and back, streams included.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/sse"
)

// DefaultVersion is the anthropic-version sent when the client sends none.
const DefaultVersion = "2023-06-01"

// Config configures one Anthropic provider instance.
type Config struct {
	Name    string
	BaseURL string // default https://api.anthropic.com
	APIKey  string
	Models  []string
	// DefaultMaxTokens is max_tokens for translated chat requests that set
	// none (Anthropic requires it). Default 4096.
	DefaultMaxTokens int64
	Timeout          time.Duration
	Client           *http.Client
	// Now stamps translated answers; nil is time.Now.
	Now func() time.Time
}

// Provider is an Anthropic provider.
type Provider struct {
	cfg    Config
	client *http.Client
}

var _ providers.Provider = (*Provider)(nil)

// New returns a Provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Name == "" {
		return nil, errors.New("anthropic: name is required")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://api.anthropic.com"
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 4096
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := cfg.Client
	if c == nil {
		c = providers.NewHTTPClient(cfg.Timeout)
	}
	return &Provider{cfg: cfg, client: c}, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return p.cfg.Name }

// Models implements providers.ModelLister.
func (p *Provider) Models() []string { return p.cfg.Models }

// AcceptsAnyModel implements providers.AnyModel.
func (p *Provider) AcceptsAnyModel() bool { return len(p.cfg.Models) == 0 }

// Serve implements providers.Provider.
func (p *Provider) Serve(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	switch r.Op {
	case providers.OpMessages:
		return p.messages(ctx, w, r)
	case providers.OpCountTokens:
		body, err := providers.SetModel(r.Body, r.Model, nil)
		if err != nil {
			return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Err: err}
		}
		rr := *r
		rr.Body, rr.Method = body, http.MethodPost
		return p.passthrough(ctx, w, &rr, p.cfg.BaseURL+"/v1/messages/count_tokens")
	case providers.OpChat:
		return p.chat(ctx, w, r)
	case providers.OpPassthrough:
		u := p.cfg.BaseURL + r.Path
		if r.Query != "" {
			u += "?" + r.Query
		}
		return p.passthrough(ctx, w, r, u)
	}
	return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest,
		Err: fmt.Errorf("%s: %w", r.Op, providers.ErrUnsupported)}
}

func (p *Provider) request(ctx context.Context, method, u string, body []byte, r *providers.Request) (*http.Response, *providers.Error) {
	req, err := providers.NewRequest(ctx, method, u, body, r.Header)
	if err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	req.Header.Set("X-Api-Key", p.cfg.APIKey)
	if req.Header.Get("Anthropic-Version") == "" {
		req.Header.Set("Anthropic-Version", DefaultVersion)
	}
	return providers.Send(p.client, p.cfg.Name, req)
}

// messages passes a native Messages call through, reading its usage.
func (p *Provider) messages(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	body, err := providers.SetModel(r.Body, r.Model, nil)
	if err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Err: err}
	}
	resp, perr := p.request(ctx, http.MethodPost, p.cfg.BaseURL+"/v1/messages", body, r)
	if perr != nil {
		return providers.Result{}, perr
	}
	defer resp.Body.Close()
	res := providers.Answered(resp)
	providers.CopyHeaders(w, resp)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sse.Header(w, resp.StatusCode)
		sw := sse.NewWriter(w)
		rd := sse.NewReader(resp.Body)
		rd.RelayTo(sw)
		defer rd.Close()
		var acc usageAcc
		for {
			ev, err := rd.Next()
			if err != nil {
				if sw.Err() != nil {
					acc.done = false // the client did not get it all
				}
				res.Usage = acc.usage()
				return res, nil
			}
			acc.see(ev)
			if err := sw.Relay(ev.Raw); err != nil {
				acc.done = false
				res.Usage = acc.usage()
				return res, nil
			}
		}
	}
	b, err := providers.ReadAnswer(resp, providers.MaxAnswerBytes)
	if err != nil {
		return res, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	var m struct {
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(b, &m) == nil && m.Usage != nil {
		res.Usage = m.Usage.toUsage()
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
	return res, nil
}

func (p *Provider) passthrough(ctx context.Context, w http.ResponseWriter, r *providers.Request, u string) (providers.Result, error) {
	resp, perr := p.request(ctx, r.Method, u, r.Body, r)
	if perr != nil {
		return providers.Result{}, perr
	}
	defer resp.Body.Close()
	res := providers.Answered(resp)
	providers.CopyHeaders(w, resp)
	var m struct {
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(providers.Pass(w, resp), &m) == nil && m.Usage != nil {
		res.Usage = m.Usage.toUsage()
	}
	return res, nil
}

// wireUsage is Anthropic's usage block.
type wireUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// toUsage converts: cache writes count as input; cache reads, which
// Anthropic does not count towards its input-token limits, are recorded
// apart.
func (u *wireUsage) toUsage() providers.Usage {
	return providers.Usage{
		InputTokens:       u.InputTokens + u.CacheCreationInputTokens,
		OutputTokens:      u.OutputTokens,
		CachedInputTokens: u.CacheReadInputTokens,
		Reported:          true,
	}
}

// usageAcc gathers usage from a Messages stream: input in message_start,
// cumulative output in message_delta, complete at message_stop.
type usageAcc struct {
	in      wireUsage
	out     int64
	deltas  int64
	started bool
	done    bool
}

func (a *usageAcc) see(ev sse.Event) {
	switch ev.Name {
	case "message_start":
		var e struct {
			Message struct {
				Usage wireUsage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(ev.Data, &e) == nil {
			a.in = e.Message.Usage
			a.out = e.Message.Usage.OutputTokens
			a.started = true
		}
	case "message_delta":
		var e struct {
			Usage *wireUsage `json:"usage"`
		}
		if json.Unmarshal(ev.Data, &e) == nil && e.Usage != nil {
			a.out = e.Usage.OutputTokens
			if e.Usage.InputTokens > 0 {
				a.in.InputTokens = e.Usage.InputTokens
			}
		}
	case "content_block_delta":
		a.deltas++
	case "message_stop":
		a.done = true
	}
}

func (a *usageAcc) usage() providers.Usage {
	u := a.in
	u.OutputTokens = max(a.out, a.deltas)
	if a.done {
		u.OutputTokens = a.out
	}
	res := u.toUsage()
	res.Reported = a.started && a.done
	return res
}

// Supports implements providers.Supporter.
func (p *Provider) Supports(op providers.Op) bool {
	return op == providers.OpMessages || op == providers.OpChat || op == providers.OpPassthrough || op == providers.OpCountTokens
}
