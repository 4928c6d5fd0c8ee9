package bedrock

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"

	"github.com/tollgate/tollgate/providers"
)

// Embedding models on Bedrock take their own bodies through InvokeModel:
// Titan Text Embeddings one text a call, Cohere Embed up to 96.
const (
	maxInputs      = 2048 // OpenAI's bound on one request's inputs
	cohereBatch    = 96
	titanParallel  = 4 // Titan calls in flight for one request
	defaultCohereT = "search_document"
)

type embeddingsRequest struct {
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	// InputType is Cohere's input_type (search_document, search_query,
	// classification, clustering), passed on when given.
	InputType string `json:"input_type"`
}

// embeddings answers an OpenAI embeddings request from a Titan or Cohere
// embedding model, in OpenAI's shape (base64 vectors when asked, as the
// OpenAI SDKs do by default).
func (p *Provider) embeddings(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	var in embeddingsRequest
	if err := json.Unmarshal(r.Body, &in); err != nil {
		return providers.Result{}, p.badRequest(err)
	}
	texts, err := inputTexts(in.Input)
	if err != nil {
		return providers.Result{}, p.badRequest(fmt.Errorf("%w: %w", providers.ErrUnsupported, err))
	}
	base := providers.BaseModelID(r.Model)
	var vecs [][]float64
	var tokens int64
	var perr *providers.Error
	switch {
	case strings.HasPrefix(base, "titan-embed"):
		vecs, tokens, perr = p.titan(ctx, r.Model, texts, in.Dimensions)
	case strings.HasPrefix(base, "embed-"): // cohere.embed-english-v3, cohere.embed-v4:0, …
		vecs, tokens, perr = p.cohere(ctx, r.Model, texts, in)
	default:
		return providers.Result{}, p.badRequest(fmt.Errorf("%w: embeddings on Bedrock are served by Titan Text Embeddings (amazon.titan-embed-*) and Cohere Embed (cohere.embed-*) models, not %s",
			providers.ErrUnsupported, r.Model))
	}
	if perr != nil {
		return providers.Result{}, perr
	}
	data := make([]map[string]any, len(vecs))
	for i, v := range vecs {
		var e any = v
		if in.EncodingFormat == "base64" {
			e = base64Floats(v)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": e}
	}
	enc, _ := json.Marshal(map[string]any{
		"object": "list", "data": data, "model": r.Model,
		"usage": map[string]any{"prompt_tokens": tokens, "total_tokens": tokens},
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(enc)
	return providers.Result{Status: http.StatusOK, Usage: providers.Usage{InputTokens: tokens, Reported: true}}, nil
}

// inputTexts reads input: a string or an array of strings (token arrays
// cannot be sent to Bedrock's models).
func inputTexts(raw json.RawMessage) ([]string, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil || len(many) == 0 {
		return nil, errors.New("input must be a string or an array of strings for Bedrock's embedding models")
	}
	if len(many) > maxInputs {
		return nil, fmt.Errorf("input has %d items, at most %d", len(many), maxInputs)
	}
	return many, nil
}

// invokeJSON makes one InvokeModel call and decodes its JSON answer into
// out; it returns the input token count Bedrock reports in its header.
func (p *Provider) invokeJSON(ctx context.Context, model string, body any, out any) (int64, *providers.Error) {
	b, _ := json.Marshal(body)
	resp, perr := p.call(ctx, model, "invoke", b, http.Header{"Accept": {"application/json"}})
	if perr != nil {
		return 0, perr
	}
	defer resp.Body.Close()
	ans, err := providers.ReadAnswer(resp, providers.MaxAnswerBytes)
	if err == nil {
		err = json.Unmarshal(ans, out)
	}
	if err != nil {
		return 0, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadGateway, Err: fmt.Errorf("undecodable embeddings answer: %w", err)}
	}
	var n count
	_ = n.UnmarshalJSON([]byte(resp.Header.Get("X-Amzn-Bedrock-Input-Token-Count")))
	return int64(n), nil
}

// titan embeds each text with its own call, a few at a time. The first
// failure stops the rest and is the answer.
func (p *Provider) titan(ctx context.Context, model string, texts []string, dims *int) ([][]float64, int64, *providers.Error) {
	vecs := make([][]float64, len(texts))
	counts := make([]int64, len(texts))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var first *providers.Error
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(titanParallel, len(texts)) {
		wg.Go(func() {
			for i := range next {
				body := map[string]any{"inputText": texts[i]}
				if dims != nil {
					body["dimensions"] = *dims
				}
				var out struct {
					Embedding []float64 `json:"embedding"`
					Tokens    count     `json:"inputTextTokenCount"`
				}
				n, perr := p.invokeJSON(ctx, model, body, &out)
				if perr == nil && len(out.Embedding) == 0 {
					perr = &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadGateway, Err: errors.New("a Titan answer without an embedding")}
				}
				if perr != nil {
					mu.Lock()
					if first == nil {
						first = perr
					}
					mu.Unlock()
					cancel()
					continue
				}
				vecs[i], counts[i] = out.Embedding, max(n, int64(out.Tokens))
			}
		})
	}
	for i := range texts {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return nil, 0, first
	}
	var total int64
	for i := range texts {
		if vecs[i] == nil {
			return nil, 0, &providers.Error{Provider: p.cfg.Name, Err: errors.New("the request ended before every text was embedded")}
		}
		total = min(total+counts[i], maxCount)
	}
	return vecs, total, nil
}

// cohere embeds the texts in batches of 96.
func (p *Provider) cohere(ctx context.Context, model string, texts []string, in embeddingsRequest) ([][]float64, int64, *providers.Error) {
	inputType := in.InputType
	if inputType == "" {
		inputType = defaultCohereT
	}
	var vecs [][]float64
	var total int64
	for start := 0; start < len(texts); start += cohereBatch {
		batch := texts[start:min(start+cohereBatch, len(texts))]
		body := map[string]any{"texts": batch, "input_type": inputType, "embedding_types": []string{"float"}}
		if in.Dimensions != nil {
			body["output_dimension"] = *in.Dimensions
		}
		var out struct {
			Embeddings json.RawMessage `json:"embeddings"`
		}
		n, perr := p.invokeJSON(ctx, model, body, &out)
		if perr != nil {
			return nil, 0, perr
		}
		got, err := cohereVectors(out.Embeddings)
		if err != nil || len(got) != len(batch) {
			return nil, 0, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadGateway,
				Err: fmt.Errorf("Cohere answered %d vectors for %d texts (%v)", len(got), len(batch), err)}
		}
		vecs = append(vecs, got...)
		total = min(total+n, maxCount)
	}
	return vecs, total, nil
}

// cohereVectors reads Cohere's embeddings: {"float": [[…]]} when types
// were asked for, else [[…]].
func cohereVectors(raw json.RawMessage) ([][]float64, error) {
	var out [][]float64
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
		return out, json.Unmarshal(raw, &out)
	}
	var typed struct {
		Float [][]float64 `json:"float"`
	}
	err := json.Unmarshal(raw, &typed)
	return typed.Float, err
}

// base64Floats encodes a vector as OpenAI does for encoding_format
// "base64": little-endian float32s, base64 (standard, padded).
func base64Floats(vec []float64) string {
	b := make([]byte, 0, 4*len(vec))
	for _, v := range vec {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
	}
	return base64.StdEncoding.EncodeToString(b)
}
