package adminapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/pricing"
)

// Explainer runs a request's admission in dry run (an
// admission.Orchestrator): the gateway's own in a local process, one of
// the admin function's in Lambda.
type Explainer interface {
	Explain(ctx context.Context, req admission.Request) (admission.Explanation, error)
}

// ErrCannotExplain wraps an Explainer's failure that is not the store's:
// the providers it needs could not be built.
var ErrCannotExplain = errors.New("explain is not available")

// explainInput is a POST /admin/explain body: a request as the gateway
// would parse it.
type explainInput struct {
	UserPath string `json:"user_path"`
	// Model is resolved as a request's is (an alias, "provider/model", a
	// bare id); with Provider, it is tried at that provider alone.
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Key      string `json:"key"`
	Tags     any    `json:"tags"` // "k=v,k2=v2" or {"k": "v"}
	Class    string `json:"class"`
	// Stream explains the request as a stream (its class's and rules'
	// bounds on streams).
	Stream       bool  `json:"stream"`
	InputTokens  int64 `json:"input_tokens"`
	MaxTokens    int64 `json:"max_tokens"`
	N            int64 `json:"n"`
	BatchRequest bool  `json:"batch"`
	// Route is the request's route ("chat", "messages", …; default chat),
	// whose learned reservation applies.
	Route string `json:"route"`
	// What the request's body would need of a model other than its first
	// choice.
	Tools            bool `json:"tools"`
	Vision           bool `json:"vision"`
	Audio            bool `json:"audio"`
	StructuredOutput bool `json:"structured_output"`
}

// explainDecision is what the request would get: its status, and what
// the answer's x-tollgate-decision, x-tollgate-rule and Retry-After
// would say, or the target it would go to.
type explainDecision struct {
	Allowed      bool     `json:"allowed"`
	Status       int      `json:"status"`
	Target       string   `json:"target,omitempty"`
	Decision     string   `json:"decision,omitempty"`
	Type         string   `json:"type,omitempty"`
	Rule         string   `json:"rule,omitempty"`
	RuleID       string   `json:"rule_id,omitempty"`
	Message      string   `json:"message,omitempty"`
	RetryAfterMS *int64   `json:"retry_after_ms,omitempty"`
	Retryable    bool     `json:"retryable,omitempty"`
	Shadow       []string `json:"shadow_refusals,omitempty"`
	WaitedMS     int64    `json:"waited_ms,omitempty"`
	ClampedTo    int64    `json:"clamped_to,omitempty"`
	// Migration names the migration whose target the request goes to.
	Migration string `json:"migration,omitempty"`
	// MaxStreamMS is how long the stream may run, when it is bounded.
	MaxStreamMS int64 `json:"max_stream_duration_ms,omitempty"`
}

// explainedTarget is one target's look: skipped, and why, or admitted.
type explainedTarget struct {
	Target       string `json:"target"`
	Pass         int    `json:"pass"`
	Admitted     bool   `json:"admitted"`
	Skipped      string `json:"skipped,omitempty"`
	Why          string `json:"why,omitempty"`
	RetryAfterMS *int64 `json:"retry_after_ms,omitempty"`
	// Capabilities are what the compatibility check knows of the model.
	Capabilities *ModelCapabilities `json:"capabilities,omitempty"`
}

type explainedRule struct {
	Rule         string `json:"rule"`
	Subject      string `json:"subject"`
	Dimension    string `json:"dimension"`
	Limit        string `json:"limit"`
	Asked        string `json:"asked"`
	Used         string `json:"used"`
	Remaining    string `json:"remaining"`
	WouldRefuse  bool   `json:"would_refuse"`
	RetryAfterMS *int64 `json:"retry_after_ms,omitempty"`
	Shadow       bool   `json:"shadow,omitempty"`
	Overridden   bool   `json:"overridden,omitempty"`
	Source       string `json:"source"`
	// Upstream is what the rule's upstream last reported it enforces, for
	// a provider or model window of a minute; ConfiguredLimit the rule's
	// configured limit when it differs from the one in force (adapt: true
	// lowered it to the report).
	Upstream        *upstreamReport `json:"upstream_reports,omitempty"`
	ConfiguredLimit string          `json:"configured_limit,omitempty"`
	// Quota and Arithmetic show how a token window of Bedrock's quota
	// computed what it asks.
	Quota      string      `json:"quota,omitempty"`
	Arithmetic *arithmetic `json:"arithmetic,omitempty"`
}

// arithmetic is a Bedrock-quota charge, term by term.
type arithmetic struct {
	InputTokens     int64  `json:"input_tokens"`
	MaxOutputTokens int64  `json:"max_output_tokens"`
	OutputBurndown  int64  `json:"output_burndown"`
	Charge          string `json:"charge"`
	SettlesTo       string `json:"settles_to"`
}

type explainPrice struct {
	InputUSDPerMillion       string `json:"input_usd_per_million"`
	OutputUSDPerMillion      string `json:"output_usd_per_million"`
	CachedInputUSDPerMillion string `json:"cached_input_usd_per_million"`
	From                     string `json:"from"`
	ReservedUSD              string `json:"reserved_usd"`
}

// explain answers what a request would get, target by target and rule
// by rule, from the gateway's own admission run dry: charging nothing.
func (h *Handler) explain(w http.ResponseWriter, r *http.Request) {
	var in explainInput
	var errs []fieldError
	if _, ok := decode(w, r, &in, &errs); !ok {
		return
	}
	req, errs := h.explainRequest(in, errs)
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	if h.cfg.Explainer == nil {
		writeError(w, http.StatusServiceUnavailable, "api_error", "explain needs the gateway's providers, which this process has not built", nil)
		return
	}
	if err := h.cfg.Watcher.Load(r.Context()); err != nil {
		h.storeFailed(w, err)
		return
	}
	ex, err := h.cfg.Explainer.Explain(r.Context(), req)
	switch {
	case errors.Is(err, admission.ErrUnknownModel):
		invalid(w, []fieldError{{Field: "model", Message: "the model " + req.Model + " is not served by this gateway"}})
		return
	case errors.Is(err, admission.ErrUnknownProvider):
		invalid(w, []fieldError{{Field: "provider", Message: "no provider is named " + in.Provider}})
		return
	case errors.Is(err, ErrCannotExplain):
		h.log.Error("explain failed", "err", err)
		writeError(w, http.StatusServiceUnavailable, "api_error", err.Error(), nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h.explained(r.Context(), req, ex))
}

// explainRequest is the admission request of an explain body, and what
// is wrong with it.
func (h *Handler) explainRequest(in explainInput, errs []fieldError) (admission.Request, []fieldError) {
	if _, err := limiter.ParseUserPath(in.UserPath); err != nil {
		errs = append(errs, fieldError{Field: "user_path", Message: err.Error()})
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"input_tokens", in.InputTokens}, {"max_tokens", in.MaxTokens}, {"n", in.N}} {
		if f.v < 0 || f.v > limiter.MaxAmount {
			errs = append(errs, fieldError{Field: f.name, Message: "a whole number from 0"})
		}
	}
	tags, err := tagsOf(in.Tags)
	if err != nil {
		errs = append(errs, fieldError{Field: "tags", Message: err.Error()})
	}
	if in.Class != "" && h.cfg.Classes != nil && !slices.Contains(h.cfg.Classes, in.Class) {
		errs = append(errs, fieldError{Field: "class", Message: "one of " + strings.Join(h.cfg.Classes, ", ")})
	}
	route := cmpOr(in.Route, "chat")
	op, ok := providers.ParseOp(route)
	if !ok {
		errs = append(errs, fieldError{Field: "route", Message: "a route: chat, responses, messages, embeddings, generate, audio, batches, count_tokens, realtime or passthrough"})
	}
	if in.BatchRequest {
		op = providers.OpBatches
	}
	model := in.Model
	switch {
	case op == providers.OpBatches && in.Provider == "":
		errs = append(errs, fieldError{Field: "provider", Message: "a batch is submitted to a provider: give its name"})
	case op == providers.OpBatches:
		model = ""
	case model == "":
		errs = append(errs, fieldError{Field: "model", Message: "the model the request names: explain resolves it as the gateway does"})
	case in.Provider != "":
		model = in.Provider + "/" + model
	}
	req := admission.Request{
		ID: "explain", Model: model, Provider: in.Provider, Op: op, Stream: in.Stream,
		Caller:      admission.Caller{UserPath: in.UserPath, KeyID: in.Key, Tags: tags, Class: in.Class},
		InputTokens: in.InputTokens, MaxTokens: in.MaxTokens, Choices: in.N,
		UserPathOnly: op == providers.OpBatches, Free: op == providers.OpCountTokens,
		NoOutput: op == providers.OpEmbeddings || op == providers.OpAudio, Session: op == providers.OpRealtime,
	}
	req.Body = &explainBody{op: op, needs: admission.Needs{Tools: in.Tools, Vision: in.Vision, Audio: in.Audio, StructuredOutput: in.StructuredOutput}}
	return req, errs
}

// explainBody is the body of a request explained: its needs as given, and
// the cap a clamp or cut_at_reservation would set, shown, never sent
// (Gemini's nested cap is not lowered, as by the gateway).
type explainBody struct {
	op    providers.Op
	needs admission.Needs
}

func (b *explainBody) Needs() admission.Needs { return b.needs }

func (b *explainBody) Clamp(int64) bool { return b.op != providers.OpGenerate }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// explained is the answer of an explain: the decision, every target's
// look, and the rules, price and learned estimate at the target that
// decided.
func (h *Handler) explained(ctx context.Context, req admission.Request, ex admission.Explanation) map[string]any {
	st := ex.Step
	dec := stepDecision(st, ex.Trace)
	var targets []explainedTarget
	var deciding *admission.Look
	for i := range ex.Trace.Looks {
		l := &ex.Trace.Looks[i]
		et := explainedTarget{Target: targetName(l.Target), Pass: l.Pass, Admitted: l.Skip == nil}
		if l.Target.Model != "" {
			caps := CapabilitiesOf("", l.Capabilities)
			et.Capabilities = &caps
		}
		if sk := l.Skip; sk != nil {
			et.Skipped, et.Why = sk.Reason.String(), skipWhy(sk)
			if sk.Retryable {
				et.RetryAfterMS = retryMS(sk.Wait)
			}
		}
		targets = append(targets, et)
		if (l.Skip == nil && st.Kind == admission.Forward) || (st.Refusal != nil && l.Skip == st.Refusal) {
			deciding = l
		}
	}
	out := map[string]any{
		"model":    req.Model,
		"route":    map[string]any{"name": ex.Route.Name, "strategy": strategyName(ex.Route.Strategy), "targets": routeTargets(ex.Route)},
		"decision": dec,
		"targets":  targets,
		"rules":    []explainedRule{},
		"charged":  false,
	}
	if m := ex.Trace.Migration; m != nil {
		out["migration"] = map[string]any{"name": m.Name, "from": m.From, "to": m.To, "share": pct(m.Share), "migrated": m.Migrated,
			"migrated_to": st.Migration != ""}
	}
	if deciding == nil || deciding.Request.Subject.Provider == "" {
		return out
	}
	lr := deciding.Request
	rules := explainedRules(deciding.Rules, lr)
	h.withUpstreamReports(ctx, rules, deciding.Rules, lr)
	out["rules"] = rules
	prices := h.cfg.Prices
	if prices == nil {
		prices = pricing.New(nil, nil)
	}
	_, from := prices.Lookup(lr.Subject.Provider, lr.Subject.Model)
	out["price"] = explainPrice{
		InputUSDPerMillion:       limiter.FormatUSD(lr.Price.Input),
		OutputUSDPerMillion:      limiter.FormatUSD(lr.Price.Output),
		CachedInputUSDPerMillion: limiter.FormatUSD(lr.Price.CachedInput),
		From:                     string(from),
		ReservedUSD:              limiter.FormatUSD(lr.Price.Cost(limiter.Usage{InputTokens: lr.InputTokens, OutputTokens: lr.OutputTokens})),
	}
	out["reserved_output_tokens"] = lr.OutputTokens
	var learned any
	if h.cfg.Estimates != nil {
		if est, ok := h.cfg.Estimates.OutputEstimate(ctx, req.Op.String(), lr.Subject.Model, req.Caller.KeyID); ok {
			learned = map[string]any{"route": req.Op.String(), "output_tokens_p95": est.P95, "samples": est.Samples, "per_key": est.PerKey,
				"reserves_without_a_cap": max(est.P95, h.cfg.AdaptiveFloor)}
		}
	}
	out["learned_estimate"] = learned
	return out
}

// stepDecision is what the answer to a request whose admission ends with
// st would say.
func stepDecision(st admission.Step, tr admission.Trace) explainDecision {
	out := explainDecision{WaitedMS: tr.Waited.Milliseconds(), ClampedTo: tr.ClampedTo}
	switch st.Kind {
	case admission.Forward:
		d := decisionOf(st.Decision)
		d.Target, d.WaitedMS, d.ClampedTo = targetName(st.Target), out.WaitedMS, out.ClampedTo
		d.MaxStreamMS = st.Stream.MaxDuration.Milliseconds()
		d.Migration = st.Migration
		return d
	case admission.Failed:
		out.Status, out.Type, out.Message = http.StatusBadGateway, "server_error", "no target could serve the request"
		return out
	}
	if len(st.Incompatible) > 0 {
		d := skipDecision(st, out)
		var why []string
		for _, sk := range st.Incompatible {
			why = append(why, targetName(sk.Target)+": "+sk.Why)
		}
		d.Decision = "no_compatible_target"
		if st.Refusal == nil {
			d.Status, d.Type, d.Message = http.StatusBadRequest, "invalid_request_error", "no target can take this request"
		}
		d.Message += "; no other target can take the request: " + strings.Join(why, "; ")
		return d
	}
	return skipDecision(st, out)
}

// skipDecision is what the answer of a refusal says.
func skipDecision(st admission.Step, out explainDecision) explainDecision {
	sk := st.Refusal
	if sk == nil {
		return out
	}
	retry := func() {
		if sk.Retryable {
			out.RetryAfterMS, out.Retryable = retryMS(sk.Wait), true
		}
	}
	switch sk.Reason {
	case admission.SkipRefused:
		d := decisionOf(*sk.Decision)
		d.WaitedMS, d.ClampedTo = out.WaitedMS, out.ClampedTo
		return d
	case admission.SkipPaused:
		out.Status, out.Decision, out.Type, out.RuleID, out.Message = http.StatusServiceUnavailable, "paused", "overloaded_error", sk.Pause.ID(), skipWhy(sk)
		retry()
	default:
		out.Status, out.Decision, out.Type, out.RuleID, out.Message = http.StatusTooManyRequests, "local_reject", "rate_limit_error",
			"cooldown:"+targetName(sk.Target), skipWhy(sk)
		retry()
	}
	return out
}

// skipWhy says why a target was skipped.
func skipWhy(sk *admission.Skip) string {
	switch sk.Reason {
	case admission.SkipRefused:
		return sk.Decision.Refused.Message()
	case admission.SkipIncompatible, admission.SkipDowngrading:
		return sk.Why
	case admission.SkipPaused:
		msg := "paused: " + sk.Pause.ID()
		if sk.Pause.Reason != "" {
			msg += " (" + sk.Pause.Reason + ")"
		}
		return msg
	}
	return "provider " + sk.Target.Provider.Name() + " asked to wait before more " + sk.Target.Model + " requests (an upstream 429)"
}

// retryMS is a wait in whole milliseconds, rounded up as the answer's
// retry-after-ms is.
func retryMS(d time.Duration) *int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return &ms
}

func targetName(t providers.Target) string {
	if t.Provider == nil {
		return ""
	}
	if t.Model == "" {
		return t.Provider.Name()
	}
	return t.String()
}

func routeTargets(rt providers.Route) []string {
	out := make([]string, 0, len(rt.Targets))
	for _, t := range rt.Targets {
		out = append(out, targetName(t))
	}
	return out
}

func strategyName(s providers.Strategy) string {
	if s == providers.Weighted {
		return "weighted"
	}
	return "failover"
}

func decisionOf(d limiter.Decision) explainDecision {
	out := explainDecision{Allowed: d.Allowed, Status: http.StatusOK}
	for i := range d.Shadow {
		out.Shadow = append(out.Shadow, refusalName(&d.Shadow[i]))
	}
	if r := d.Refused; r != nil {
		out.Status, out.Decision, out.Type, out.Rule, out.RuleID, out.Message, out.Retryable = http.StatusTooManyRequests, "local_reject",
			"rate_limit_error", refusalName(r), r.Rule.ID(), r.Message(), r.Retryable
		if r.IsBudget() && !r.ReservedOnly {
			out.Type = "insufficient_quota" // spent: a reserved-only refusal is a retryable rate limit
		}
		if r.Retryable {
			out.RetryAfterMS = retryMS(r.RetryAfter)
		}
	}
	return out
}

// refusalName is the x-tollgate-rule header's name of a refusal.
func refusalName(r *limiter.Refusal) string {
	name := r.Rule.Scope.String() + ":" + r.Subject() + ":" + r.Rule.PeriodName()
	if isBudget(r.Rule) {
		return "budget:" + name
	}
	return name
}

func explainedRules(rules []limiter.ExplainedRule, req limiter.Request) []explainedRule {
	out := []explainedRule{}
	for _, e := range rules {
		ref := limiter.Refusal{Rule: e.Rule, Child: e.Child}
		amount := func(v int64) string {
			if e.Kind == limiter.KindCost {
				return "$" + limiter.FormatUSD(v)
			}
			return itoa(v)
		}
		er := explainedRule{
			Rule: refusalName(&ref), Subject: ref.Subject(), Dimension: dimensionName(e.Kind),
			Limit: amount(e.Limit), Asked: amount(e.Amount), Used: amount(e.Used), Remaining: amount(e.Remaining),
			WouldRefuse: e.WouldRefuse, Shadow: e.Rule.Shadow, Overridden: e.Overridden, Source: e.Rule.Source.String(),
		}
		if e.WouldRefuse && e.Retryable {
			er.RetryAfterMS = retryMS(e.RetryAfter)
		}
		if w, ok := e.Rule.Limit.(limiter.Window); ok {
			er.Quota = quotaName(w)
		}
		if e.Burndown > 0 {
			er.Arithmetic = &arithmetic{
				InputTokens: req.InputTokens, MaxOutputTokens: req.OutputTokens, OutputBurndown: e.Burndown,
				Charge: fmt.Sprintf("input + cache write + cache read + max output × burndown = %d + %d × %d = %d",
					req.InputTokens, req.OutputTokens, e.Burndown, e.Amount),
				SettlesTo: fmt.Sprintf("input + cache write + output × %d (cache reads and unused output given back)", e.Burndown),
			}
		}
		out = append(out, er)
	}
	return out
}

func dimensionName(k limiter.Kind) string {
	return map[limiter.Kind]string{
		limiter.KindRequests: "requests", limiter.KindTokens: "tokens", limiter.KindInputTokens: "input_tokens",
		limiter.KindOutputTokens: "output_tokens", limiter.KindInFlight: "in_flight", limiter.KindCost: "cost_usd",
	}[k]
}

// tagsOf reads tags given as "k=v,k2=v2" or as an object.
func tagsOf(v any) ([]limiter.Tag, error) {
	switch t := v.(type) {
	case nil:
		return nil, nil
	case string:
		return limiter.ParseTags(t)
	case map[string]any:
		var parts []string
		for k, val := range t {
			s, ok := val.(string)
			if !ok {
				return nil, errBadTags
			}
			parts = append(parts, k+"="+s)
		}
		return limiter.ParseTags(strings.Join(parts, ","))
	}
	return nil, errBadTags
}

// upstreamReport is what an upstream last reported of its limits.
type upstreamReport struct {
	LimitRequests     *int64 `json:"limit_requests,omitempty"`
	LimitTokens       *int64 `json:"limit_tokens,omitempty"`
	RemainingRequests *int64 `json:"remaining_requests,omitempty"`
	RemainingTokens   *int64 `json:"remaining_tokens,omitempty"`
	At                string `json:"at"`
}

// UpstreamReader reads what upstreams reported of their limits.
type UpstreamReader interface {
	UpstreamReports(ctx context.Context, keys []string) (map[string]limiter.UpstreamReport, error)
}

// withUpstreamReports adds, beside each provider or model rule of the
// explained request's target, what its upstream reports it enforces, and
// the configured limit where adapt lowered it.
func (h *Handler) withUpstreamReports(ctx context.Context, out []explainedRule, rules []limiter.ExplainedRule, lr limiter.Request) {
	if h.cfg.Upstream == nil {
		return
	}
	p, m := lr.Subject.Provider, lr.Subject.Model
	keys := []string{strings.ToLower(p + "/" + m), strings.ToLower(p) + "/*"}
	reps, err := h.cfg.Upstream.UpstreamReports(ctx, keys)
	if err != nil || len(reps) == 0 {
		return
	}
	for i, e := range rules {
		if i >= len(out) || !e.Rule.ReportedFor(p, m) {
			continue
		}
		key := keys[0]
		if e.Rule.Scope == limiter.ScopeProvider {
			key = keys[1]
		}
		rep, ok := reps[key]
		if !ok {
			continue
		}
		out[i].Upstream = reportOf(rep)
		now, _ := e.Rule.Limit.(limiter.Window) // ReportedFor: a one-minute window
		for _, c := range h.cfg.ConfigRules {
			if c.Key() != e.Rule.Key() {
				continue
			}
			was, _ := c.Limit.(limiter.Window)
			if was.MaxRequests != now.MaxRequests && e.Kind == limiter.KindRequests {
				out[i].ConfiguredLimit = itoa(was.MaxRequests)
			}
			if was.MaxTokens != now.MaxTokens && e.Kind == limiter.KindTokens {
				out[i].ConfiguredLimit = itoa(was.MaxTokens)
			}
		}
	}
}

func reportOf(rep limiter.UpstreamReport) *upstreamReport {
	opt := func(v int64, least int64) *int64 {
		if v < least {
			return nil
		}
		return &v
	}
	return &upstreamReport{LimitRequests: opt(rep.LimitRequests, 1), LimitTokens: opt(rep.LimitTokens, 1),
		RemainingRequests: opt(rep.RemainingRequests, 0), RemainingTokens: opt(rep.RemainingTokens, 0), At: rep.At.UTC().Format(time.RFC3339)}
}
