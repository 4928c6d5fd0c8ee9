package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/jsonx"
)

// responsesRequest is what admission reads of a Responses API call.
type responsesRequest struct {
	Model           *string         `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    string          `json:"instructions"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
	Tools           rawText         `json:"tools"`
}

func (h *Handler) responses(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolOpenAI
	var req responsesRequest
	caller, body, ok := h.beginJSON(w, r, proto, &req, "model", "input", "instructions", "max_output_tokens", "stream", "tools")
	if !ok {
		return
	}
	if req.Model == nil || *req.Model == "" {
		missingModel(w, proto)
		return
	}
	if len(req.Input) == 0 || bytes.Equal(req.Input, []byte("null")) {
		badRequest(w, proto, "input", "input is required")
		return
	}
	maxOut, ok := positive(w, proto, "max_output_tokens", req.MaxOutputTokens)
	if !ok {
		return
	}
	model := *req.Model
	in := h.count(model, req.Instructions) + h.count(model, string(req.Tools)) + h.count(model, inputText(req.Input))
	h.serve(w, r, &exchange{proto: proto, op: providers.OpResponses, model: model, body: body, stream: req.Stream,
		maxTokens: maxOut, inputTokens: in, caller: caller})
}

// inputText gathers the text of a Responses input: a string, or items
// whose content is a string or parts with text.
func inputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var items []struct {
		Content content `json:"content"`
		Text    string  `json:"text"`
		Output  string  `json:"output"`
	}
	if json.Unmarshal(raw, &items) != nil {
		return string(raw)
	}
	var b strings.Builder
	for _, it := range items {
		b.WriteString(string(it.Content))
		b.WriteString(it.Text)
		b.WriteString(it.Output)
	}
	return b.String()
}

func (h *Handler) embeddings(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolOpenAI
	var req struct {
		Model *string         `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	caller, body, ok := h.beginJSON(w, r, proto, &req, "model", "input")
	if !ok {
		return
	}
	if req.Model == nil || *req.Model == "" {
		missingModel(w, proto)
		return
	}
	in, err := h.embeddingTokens(*req.Model, req.Input)
	if err != nil {
		badRequest(w, proto, "input", err.Error())
		return
	}
	h.serve(w, r, &exchange{proto: proto, op: providers.OpEmbeddings, model: *req.Model, body: body, inputTokens: in, caller: caller})
}

// embeddingTokens counts an embeddings input: a string, strings, a token
// array or token arrays.
func (h *Handler) embeddingTokens(model string, raw json.RawMessage) (int64, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return h.count(model, s), nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		n := int64(0)
		for _, x := range ss {
			n += h.count(model, x)
		}
		return n, nil
	}
	var toks []int64
	if json.Unmarshal(raw, &toks) == nil && len(toks) > 0 {
		return int64(len(toks)), nil
	}
	var many [][]int64
	if json.Unmarshal(raw, &many) == nil && len(many) > 0 {
		n := 0
		for _, t := range many {
			n += len(t)
		}
		return int64(n), nil
	}
	return 0, errors.New("input must be a non-empty string, array of strings, or token arrays")
}

// messagesRequest is what admission reads of an Anthropic Messages call.
type messagesRequest struct {
	Model     *string         `json:"model"`
	MaxTokens *int64          `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Stream bool    `json:"stream"`
	Tools  rawText `json:"tools"`
}

func (h *Handler) messages(w http.ResponseWriter, r *http.Request) {
	req, caller, body, ok := h.beginMessages(w, r, true)
	if !ok {
		return
	}
	model := *req.Model
	h.serve(w, r, &exchange{proto: providers.ProtocolAnthropic, op: providers.OpMessages, model: model, body: body, stream: req.Stream,
		maxTokens: *req.MaxTokens, inputTokens: h.messagesInput(model, &req), caller: caller, header: r.Header})
}

// countTokens handles Anthropic's POST /v1/messages/count_tokens: charged
// nothing (Anthropic neither bills it nor counts it against the limits of
// generations, so an agent that counts before each message keeps its
// whole rate), sent to the model's provider.
func (h *Handler) countTokens(w http.ResponseWriter, r *http.Request) {
	req, caller, body, ok := h.beginMessages(w, r, false)
	if !ok {
		return
	}
	model := *req.Model
	h.serve(w, r, &exchange{proto: providers.ProtocolAnthropic, op: providers.OpCountTokens, model: model, body: body,
		inputTokens: h.messagesInput(model, &req), free: true, caller: caller, header: r.Header,
		path: "/v1/messages/count_tokens"})
}

// beginMessages reads a Messages body (or a count_tokens one, which has
// no max_tokens), answering 400 in Anthropic's shape for what it lacks.
func (h *Handler) beginMessages(w http.ResponseWriter, r *http.Request, needMaxTokens bool) (messagesRequest, Caller, []byte, bool) {
	const proto = providers.ProtocolAnthropic
	var req messagesRequest
	caller, body, ok := h.beginJSON(w, r, proto, &req, "model", "max_tokens", "system", "messages", "stream", "tools")
	if !ok {
		return req, caller, nil, false
	}
	switch {
	case req.Model == nil || *req.Model == "":
		badRequest(w, proto, "model", "model: field required")
		return req, caller, nil, false
	case needMaxTokens && req.MaxTokens == nil:
		badRequest(w, proto, "max_tokens", "max_tokens: field required")
		return req, caller, nil, false
	case needMaxTokens && (*req.MaxTokens < 1 || *req.MaxTokens > providers.MaxRequestTokens):
		badRequest(w, proto, "max_tokens", "max_tokens: must be an integer from 1 to "+itoa(providers.MaxRequestTokens))
		return req, caller, nil, false
	case len(req.Messages) == 0:
		badRequest(w, proto, "messages", "messages: at least one message is required")
		return req, caller, nil, false
	}
	return req, caller, body, true
}

// messagesInput estimates the prompt of a Messages request.
func (h *Handler) messagesInput(model string, req *messagesRequest) int64 {
	in := int64(tokensPerReply) + h.count(model, blocksText(req.System)) + h.count(model, string(req.Tools))
	for _, m := range req.Messages {
		in += tokensPerMessage + h.count(model, blocksText(m.Content))
	}
	return in
}

// blocksText gathers the text of Anthropic content: a string or blocks
// (text, tool results; other blocks count as JSON).
func blocksText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type    string          `json:"type"`
		Text    string          `json:"text"`
		Content json.RawMessage `json:"content"`
		Input   json.RawMessage `json:"input"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return string(raw)
	}
	var b strings.Builder
	for _, bl := range blocks {
		switch bl.Type {
		case "text":
			b.WriteString(bl.Text)
		case "tool_result":
			b.WriteString(blocksText(bl.Content))
		case "tool_use":
			b.Write(bl.Input)
		case "image", "document":
			b.WriteString(strings.Repeat(" x", imagePartTokens))
		}
	}
	return b.String()
}

// audio handles /v1/audio/{speech,transcriptions,translations}: speech is
// JSON whose input text is counted; the others are multipart uploads whose
// cost the provider reports.
func (h *Handler) audio(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolOpenAI
	caller, ok := h.authenticate(w, r, proto)
	if !ok {
		return
	}
	body, ok := h.readBody(w, r, proto)
	if !ok {
		return
	}
	var model, text string
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		m, err := formValue(body, params["boundary"], "model")
		if err != nil {
			badRequest(w, proto, "", "invalid multipart body: "+err.Error())
			return
		}
		model = m
	case "application/json":
		if refuseDuplicates(w, proto, body) || refuseFolded(w, proto, body, "", "model", "input") {
			return
		}
		var req struct {
			Model string `json:"model"`
			Input string `json:"input"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			badJSON(w, proto, err)
			return
		}
		model, text = req.Model, req.Input
	default:
		writeError(w, proto, apiError{status: http.StatusUnsupportedMediaType, typ: errTypeInvalidRequest, code: errCodeUnsupportedMediaType,
			message: "unsupported Content-Type " + r.Header.Get("Content-Type") + ": send application/json or multipart/form-data"}, 0)
		return
	}
	if model == "" {
		missingModel(w, proto)
		return
	}
	h.serve(w, r, &exchange{proto: proto, op: providers.OpAudio, model: model, body: body, inputTokens: h.count(model, text),
		caller: caller, path: r.URL.Path, header: r.Header, noOutput: true})
}

// formValue reads one field of a multipart form.
func formValue(body []byte, boundary, name string) (string, error) {
	if boundary == "" {
		return "", errors.New("no boundary")
	}
	rd := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := rd.NextPart()
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if p.FormName() == name {
			b, err := io.ReadAll(io.LimitReader(p, 1024))
			return strings.TrimSpace(string(b)), err
		}
	}
}

// batches submits a batch: one request by user-path rules only, holding no
// slot, since the batch file may mix models. The provider is named by
// X-Tollgate-Provider, else the first that takes batches.
func (h *Handler) batches(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolOpenAI
	var req struct {
		InputFileID string `json:"input_file_id"`
		Endpoint    string `json:"endpoint"`
	}
	caller, body, ok := h.beginJSON(w, r, proto, &req, "input_file_id", "endpoint")
	if !ok {
		return
	}
	if req.InputFileID == "" || req.Endpoint == "" {
		badRequest(w, proto, "input_file_id", "input_file_id and endpoint are required")
		return
	}
	p, ok := h.pickProvider(r.Header.Get(headerProvider), providers.OpBatches)
	if !ok {
		writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, code: errCodeNotSupported,
			message: "no configured provider accepts batches"}, 0)
		return
	}
	route := providers.Route{Name: p.Name(), Strategy: providers.Failover, Targets: []providers.Target{{Provider: p, Weight: 1}}}
	h.serve(w, r, &exchange{proto: proto, op: providers.OpBatches, body: body, caller: caller, userPathOnly: true, route: &route, header: r.Header})
}

// headerProvider names the provider of a call that names no model.
const headerProvider = "X-Tollgate-Provider"

func (h *Handler) pickProvider(name string, op providers.Op) (providers.Provider, bool) {
	if name != "" {
		return h.cfg.Catalog.Provider(name)
	}
	for _, p := range h.cfg.Catalog.Providers() {
		if s, ok := p.(providers.Supporter); ok && s.Supports(op) {
			return p, true
		}
	}
	return nil, false
}

// passthrough forwards /p/{provider}/{path} to that provider as it is,
// after admission by user-path and provider rules (and model rules when
// the JSON body names a model).
func (h *Handler) passthrough(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolOpenAI
	caller, ok := h.authenticate(w, r, proto)
	if !ok {
		return
	}
	p, known := h.cfg.Catalog.Provider(r.PathValue("provider"))
	if !known {
		writeError(w, proto, apiError{status: http.StatusNotFound, typ: errTypeNotFound, message: "unknown provider " + r.PathValue("provider")}, 0)
		return
	}
	body, ok := h.readBody(w, r, proto)
	if !ok {
		return
	}
	var req struct {
		Model     string `json:"model"`
		Stream    bool   `json:"stream"`
		MaxTokens int64  `json:"max_tokens"`
		N         int64  `json:"n"`
	}
	// A body that is not JSON goes through as it is; its sizes, read
	// loosely, still only ever lower nothing: out-of-range values take the
	// defaults, and the reservation is capped like any other. A JSON body
	// is read as an upstream reads it: exactly, each member once.
	if json.Valid(body) && (refuseDuplicates(w, proto, body) || refuseFolded(w, proto, body, "", "model", "stream", "max_tokens", "n")) {
		return
	}
	_ = json.Unmarshal(body, &req)
	if req.MaxTokens < 1 || req.MaxTokens > providers.MaxRequestTokens {
		req.MaxTokens = 0
	}
	if req.N < 1 || req.N > providers.MaxChoices {
		req.N = 1
	}
	route := providers.Route{Name: p.Name(), Strategy: providers.Failover, Targets: []providers.Target{{Provider: p, Model: req.Model, Weight: 1}}}
	h.serve(w, r, &exchange{proto: proto, op: providers.OpPassthrough, model: req.Model, body: body, stream: req.Stream,
		maxTokens: req.MaxTokens, choices: req.N, inputTokens: h.count(req.Model, string(body)), caller: caller, route: &route,
		method: r.Method, path: "/" + r.PathValue("path"), query: r.URL.RawQuery, header: r.Header})
}

// geminiContent is Gemini's content: parts with text.
type geminiContent struct {
	Parts []struct {
		Text string `json:"text"`
	} `json:"parts"`
}

func (c *geminiContent) text(b *strings.Builder) {
	if c == nil {
		return
	}
	for _, p := range c.Parts {
		b.WriteString(p.Text)
	}
}

// generate handles Gemini's POST /v1beta/models/{model}:{action}:
// generateContent and streamGenerateContent, embedContent and
// batchEmbedContents (charged their input, like embeddings), countTokens
// (charged nothing: the provider neither bills it nor counts it against
// generations).
func (h *Handler) generate(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolGemini
	target := r.PathValue("target")
	model, action, _ := strings.Cut(target, ":")
	switch action {
	case "generateContent", "streamGenerateContent":
	case "embedContent", "batchEmbedContents", "countTokens":
		h.geminiAux(w, r, model, action)
		return
	default:
		h.log.Info("unknown route", "method", r.Method, "path", r.URL.Path)
		writeError(w, proto, apiError{status: http.StatusNotFound, typ: errTypeNotFound,
			message: "unknown method " + target + ": want {model}:generateContent, :streamGenerateContent, :countTokens, :embedContent or :batchEmbedContents"}, 0)
		return
	}
	// Google's JSON mapping takes a field by its JSON name or its proto
	// name (maxOutputTokens or max_output_tokens): both are read, and a
	// body giving both is refused, since which one the API takes is not
	// the gateway's to guess.
	type generationConfig struct {
		MaxOutputTokens      *int64 `json:"maxOutputTokens"`
		MaxOutputTokensProto *int64 `json:"max_output_tokens"`
		CandidateCount       *int64 `json:"candidateCount"`
		CandidateCountProto  *int64 `json:"candidate_count"`
	}
	var req struct {
		Contents               []geminiContent   `json:"contents"`
		SystemInstruction      *geminiContent    `json:"systemInstruction"`
		SystemInstructionProto *geminiContent    `json:"system_instruction"`
		GenerationConfig       *generationConfig `json:"generationConfig"`
		GenerationConfigProto  *generationConfig `json:"generation_config"`
	}
	caller, body, ok := h.beginJSON(w, r, proto, &req,
		"contents", "systemInstruction", "system_instruction", "generationConfig", "generation_config")
	if !ok {
		return
	}
	if len(req.Contents) == 0 {
		badRequest(w, proto, "contents", "contents is not specified")
		return
	}
	cfg, ok := oneSpelling(w, proto, "generationConfig", req.GenerationConfig, req.GenerationConfigProto)
	system, ok2 := oneSpelling(w, proto, "systemInstruction", req.SystemInstruction, req.SystemInstructionProto)
	if !ok || !ok2 {
		return
	}
	if cfg == nil {
		cfg = &generationConfig{}
	} else {
		raw, _ := jsonx.Member(body, "generationConfig")
		if req.GenerationConfigProto != nil {
			raw, _ = jsonx.Member(body, "generation_config")
		}
		if refuseFolded(w, proto, raw, "generationConfig.", "maxOutputTokens", "max_output_tokens", "candidateCount", "candidate_count") {
			return
		}
	}
	capValue, ok := oneSpelling(w, proto, "generationConfig.maxOutputTokens", cfg.MaxOutputTokens, cfg.MaxOutputTokensProto)
	count, ok2 := oneSpelling(w, proto, "generationConfig.candidateCount", cfg.CandidateCount, cfg.CandidateCountProto)
	if !ok || !ok2 {
		return
	}
	maxOut, ok := positive(w, proto, "generationConfig.maxOutputTokens", capValue)
	if !ok {
		return
	}
	candidates, ok := bounded(w, proto, "generationConfig.candidateCount", count, providers.MaxCandidates)
	if !ok {
		return
	}
	var text strings.Builder
	system.text(&text)
	for i := range req.Contents {
		req.Contents[i].text(&text)
	}
	h.serve(w, r, &exchange{proto: proto, op: providers.OpGenerate, model: model, body: body,
		stream: action == "streamGenerateContent", maxTokens: maxOut, choices: candidates, inputTokens: h.count(model, text.String()),
		caller: caller, path: ":" + action})
}

// geminiAux handles Gemini's embedContent, batchEmbedContents and
// countTokens.
func (h *Handler) geminiAux(w http.ResponseWriter, r *http.Request, model, action string) {
	const proto = providers.ProtocolGemini
	var req struct {
		Content  *geminiContent  `json:"content"`
		Contents []geminiContent `json:"contents"`
		Requests []struct {
			Content *geminiContent `json:"content"`
		} `json:"requests"`
		GenerateContentRequest *struct {
			Contents          []geminiContent `json:"contents"`
			SystemInstruction *geminiContent  `json:"systemInstruction"`
		} `json:"generateContentRequest"`
	}
	caller, body, ok := h.beginJSON(w, r, proto, &req, "content", "contents", "requests", "generateContentRequest")
	if !ok {
		return
	}
	var text strings.Builder
	ex := &exchange{proto: proto, model: model, body: body, caller: caller, path: ":" + action}
	switch action {
	case "embedContent":
		if req.Content == nil || len(req.Content.Parts) == 0 {
			badRequest(w, proto, "content", "content is not specified")
			return
		}
		req.Content.text(&text)
		ex.op, ex.noOutput = providers.OpEmbeddings, true
	case "batchEmbedContents":
		if len(req.Requests) == 0 {
			badRequest(w, proto, "requests", "requests is not specified")
			return
		}
		for _, q := range req.Requests {
			q.Content.text(&text)
		}
		ex.op, ex.noOutput = providers.OpEmbeddings, true
	case "countTokens":
		for i := range req.Contents {
			req.Contents[i].text(&text)
		}
		if g := req.GenerateContentRequest; g != nil {
			g.SystemInstruction.text(&text)
			for i := range g.Contents {
				g.Contents[i].text(&text)
			}
		}
		ex.op, ex.free = providers.OpCountTokens, true
	}
	ex.inputTokens = h.count(model, text.String())
	h.serve(w, r, ex)
}

// models lists the model names clients may use.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.authenticate(w, r, providers.ProtocolOpenAI); !ok {
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, id := range h.cfg.Catalog.ModelIDs() {
		owner := "tollgate"
		if rt, ok := h.cfg.Catalog.Resolve(id); ok && !rt.Alias {
			owner = rt.Targets[0].Provider.Name()
		}
		out.Data = append(out.Data, model{ID: id, Object: "model", OwnedBy: owner})
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// oneSpelling returns the one of a field's two spellings a body gives
// (json's and proto's, for Gemini), answering 400 when it gives both.
func oneSpelling[T any](w http.ResponseWriter, proto providers.Protocol, field string, a, b *T) (*T, bool) {
	if a != nil && b != nil {
		badRequest(w, proto, field, field+" is given twice, under its JSON and its proto name: send one")
		return nil, false
	}
	if a != nil {
		return a, true
	}
	return b, true
}

// begin authenticates and reads a JSON body.
func (h *Handler) begin(w http.ResponseWriter, r *http.Request, proto providers.Protocol) (Caller, []byte, bool) {
	caller, body, _, ok := h.beginChecked(w, r, proto)
	return caller, body, ok
}

// beginChecked is begin, saying also whether the body is valid JSON.
func (h *Handler) beginChecked(w http.ResponseWriter, r *http.Request, proto providers.Protocol) (Caller, []byte, bool, bool) {
	caller, ok := h.authenticate(w, r, proto)
	if !ok {
		return Caller{}, nil, false, false
	}
	body, valid, ok := h.readJSON(w, r, proto)
	return caller, body, valid, ok
}

// beginJSON is begin for a JSON route: it also decodes the body into v,
// answering 400 in the protocol's shape when it is not that JSON, or when
// a member among names (what admission reads) is spelled otherwise but
// for case.
func (h *Handler) beginJSON(w http.ResponseWriter, r *http.Request, proto providers.Protocol, v any, names ...string) (Caller, []byte, bool) {
	caller, body, ok := h.begin(w, r, proto)
	if !ok || refuseFolded(w, proto, body, "", names...) {
		return Caller{}, nil, false
	}
	if err := json.Unmarshal(body, v); err != nil {
		badJSON(w, proto, err)
		return Caller{}, nil, false
	}
	return caller, body, true
}

func (h *Handler) count(model, text string) int64 {
	if text == "" {
		return 0
	}
	return h.cfg.Estimator.Count(model, text)
}

func missingModel(w http.ResponseWriter, proto providers.Protocol) {
	badRequest(w, proto, "model", "you must provide a model parameter")
}

func badRequest(w http.ResponseWriter, proto providers.Protocol, param, msg string) {
	writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, param: param, message: msg}, 0)
}

// positive checks an optional output cap: absent is 0, else a whole
// number from 1 to providers.MaxRequestTokens.
func positive(w http.ResponseWriter, proto providers.Protocol, param string, v *int64) (int64, bool) {
	return bounded(w, proto, param, v, providers.MaxRequestTokens)
}

// bounded checks an optional count: absent is 0, else 1 to limit. A value
// outside is the client's error, answered 400 in the route's shape, so no
// absurd size reaches a counter.
func bounded(w http.ResponseWriter, proto providers.Protocol, param string, v *int64, limit int64) (int64, bool) {
	if v == nil {
		return 0, true
	}
	if *v < 1 || *v > limit {
		badRequest(w, proto, param, param+" must be an integer from 1 to "+itoa(limit))
		return 0, false
	}
	return *v, true
}
