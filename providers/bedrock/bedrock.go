// Package bedrock is the adapter for Amazon Bedrock Runtime: OpenAI chat
// completions are translated to Converse and ConverseStream, Anthropic
// Messages calls are sent to InvokeModel and InvokeModelWithResponseStream
// with the Anthropic body, and OpenAI embeddings to InvokeModel for Titan
// and Cohere embedding models. Requests are signed with SigV4 (service
// "bedrock") by the AWS SDK's signer, with the SDK's default credential
// chain: the function's IAM role inside Lambda.
//
// The package calls the Bedrock Runtime REST API itself rather than
// through the SDK's bedrockruntime client: linking that package costs
// every process 0.4 to 0.8 ms and 440 KB of initialisation before main
// (GODEBUG=inittrace=1, v1.63.13), whether it ever calls Bedrock or not,
// and the gateway's cold start is what it is measured by. The SDK's
// pieces that cost nothing at start are used instead: the credential
// chain, the v4 signer and the event-stream decoder. The tests hold the
// wire format to the bedrockruntime client's (oracle_test.go).
package bedrock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/encoding/httpbinding"

	"github.com/tollgate/tollgate/providers"
)

// SigningName is the service name Bedrock Runtime's requests are signed
// for.
const SigningName = "bedrock"

// Config configures one Bedrock provider instance.
type Config struct {
	Name string
	// Region is the Bedrock region; "" is the SDK's (AWS_REGION: the
	// function's own inside Lambda).
	Region string
	// Endpoint replaces https://bedrock-runtime.<region>.amazonaws.com
	// (the configuration fills it from AWS_ENDPOINT_URL_BEDROCK_RUNTIME);
	// "" is the SDK's base endpoint (AWS_ENDPOINT_URL) or the regional one.
	Endpoint string
	// Models are Bedrock model ids or inference profile ids (and ARNs)
	// the instance serves; empty means any.
	Models []string
	// Burndown overrides the built-in output burndown of models, by model
	// id or id prefix (see Burndown).
	Burndown map[string]int64
	// ServiceTiers maps a traffic class to the Bedrock service tier its
	// requests ask for (default, priority, flex); classes not named ask
	// for none.
	ServiceTiers map[string]string
	// Timeout bounds the wait for an answer's headers.
	Timeout time.Duration
	Client  *http.Client
	// AWS loads the SDK's configuration (credentials, region) on the first
	// call; nil is the SDK's default chain. It is never called before.
	AWS func(ctx context.Context) (aws.Config, error)
	// Now stamps translated answers; nil is time.Now.
	Now func() time.Time
}

// Provider is a Bedrock Runtime provider.
type Provider struct {
	cfg    Config
	client *http.Client

	mu   sync.Mutex
	sess *session // set on the first call that could load it
}

// session is what signing needs, loaded on first use.
type session struct {
	creds    aws.CredentialsProvider
	region   string
	endpoint *url.URL
	signer   *v4.Signer
}

var (
	_ providers.Provider   = (*Provider)(nil)
	_ providers.Burndowner = (*Provider)(nil)
)

// New returns a Provider. It reads no credentials: the first call does.
func New(cfg Config) (*Provider, error) {
	if cfg.Name == "" {
		return nil, errors.New("bedrock: name is required")
	}
	if cfg.Endpoint != "" {
		if u, err := url.Parse(cfg.Endpoint); err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("bedrock: endpoint %q is not an absolute URL", cfg.Endpoint)
		}
	}
	for model, b := range cfg.Burndown {
		if b < 1 || b > maxBurndown {
			return nil, fmt.Errorf("bedrock: burndown of %q: %d is outside 1..%d", model, b, maxBurndown)
		}
	}
	for class, tier := range cfg.ServiceTiers {
		if !validTier(tier) {
			return nil, fmt.Errorf("bedrock: service tier of class %q: %q is not one of %s", class, tier, strings.Join(serviceTiers, ", "))
		}
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

// Supports implements providers.Supporter.
func (p *Provider) Supports(op providers.Op) bool {
	return op == providers.OpChat || op == providers.OpMessages || op == providers.OpEmbeddings
}

// OutputBurndown implements providers.Burndowner.
func (p *Provider) OutputBurndown(model string) int64 { return Burndown(model, p.cfg.Burndown) }

// Serve implements providers.Provider.
func (p *Provider) Serve(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	switch r.Op {
	case providers.OpChat:
		return p.chat(ctx, w, r)
	case providers.OpMessages:
		return p.messages(ctx, w, r)
	case providers.OpEmbeddings:
		return p.embeddings(ctx, w, r)
	}
	return providers.Result{}, p.badRequest(fmt.Errorf("%s: %w", r.Op, providers.ErrUnsupported))
}

func (p *Provider) badRequest(err error) *providers.Error {
	return &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Err: err}
}

// session returns the signing session, loading the SDK's configuration on
// the first call. A failed load is not kept: the next call tries again.
func (p *Provider) session(ctx context.Context) (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sess != nil {
		return p.sess, nil
	}
	load := p.cfg.AWS
	if load == nil {
		load = func(ctx context.Context) (aws.Config, error) { return config.LoadDefaultConfig(ctx) }
	}
	ac, err := load(ctx)
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	if ac.Credentials == nil {
		return nil, errors.New("AWS configuration: no credentials")
	}
	region := p.cfg.Region
	if region == "" {
		region = ac.Region
	}
	if region == "" {
		return nil, errors.New("no region: set the provider's region or AWS_REGION")
	}
	endpoint := p.cfg.Endpoint
	if endpoint == "" && ac.BaseEndpoint != nil {
		endpoint = *ac.BaseEndpoint
	}
	if endpoint == "" {
		endpoint = "https://bedrock-runtime." + region + ".amazonaws.com"
		if strings.HasPrefix(region, "cn-") {
			endpoint += ".cn"
		}
	}
	u, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q is not an absolute URL", endpoint)
	}
	p.sess = &session{creds: ac.Credentials, region: region, endpoint: u, signer: v4.NewSigner()}
	return p.sess, nil
}

// call sends one signed POST to /model/{model}/{action} and returns the
// answer when it is 2xx. Anything else is an *providers.Error with nothing
// written: a transport failure (Status 0) or Bedrock's error, classified
// (see classify). Nothing is retried here: a throttled call comes back at
// once, for the gateway to fail over and cool down.
func (p *Provider) call(ctx context.Context, model, action string, body []byte, hdr http.Header) (*http.Response, *providers.Error) {
	s, err := p.session(ctx)
	if err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	u := *s.endpoint
	path := "/model/" + model + "/" + action
	u.Path = strings.TrimRight(s.endpoint.Path, "/") + path
	// The model id is one path label, escaped as the SDK escapes labels
	// (":" and "/" of profile ids and ARNs included).
	u.RawPath = strings.TrimRight(s.endpoint.EscapedPath(), "/") + "/model/" + httpbinding.EscapePath(model, true) + "/" + action
	req, err := providers.NewRequest(ctx, http.MethodPost, u.String(), body, http.Header{})
	if err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: fmt.Errorf("AWS credentials: %w", err)}
	}
	sum := sha256.Sum256(body)
	if err := s.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), SigningName, s.region, time.Now()); err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: fmt.Errorf("signing: %w", err)}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, p.upstreamError(resp)
}

// tierOf returns the service tier a request of class asks for, or "".
func (p *Provider) tierOf(class string) string { return p.cfg.ServiceTiers[class] }

// serviceTiers are the tiers Bedrock takes (reserved needs a reservation,
// which a request cannot ask for).
var serviceTiers = []string{"default", "priority", "flex"}

func validTier(t string) bool {
	for _, v := range serviceTiers {
		if t == v {
			return true
		}
	}
	return false
}

// requestID relays Bedrock's request id to the client.
func requestID(w http.ResponseWriter, resp *http.Response) {
	if v := resp.Header.Get("X-Amzn-Requestid"); v != "" {
		w.Header().Set("X-Upstream-Request-Id", v)
	}
}
