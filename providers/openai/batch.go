package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/jsonx"
)

// Batch usage: a batch's object says when it has ended; what each of its
// requests used is in its output file, one JSON line per request with the
// answer's body (and its model and usage) in it.

var _ providers.BatchPoller = (*Provider)(nil)

// maxBatchLine bounds one line of an output file: one answer.
const maxBatchLine = providers.MaxAnswerBytes

// maxBatchOutput bounds the output file read.
const maxBatchOutput = 1 << 30

// PollBatch implements providers.BatchPoller.
func (p *Provider) PollBatch(ctx context.Context, id string) (providers.BatchOutcome, error) {
	var b struct {
		Status       string `json:"status"`
		OutputFileID string `json:"output_file_id"`
	}
	body, err := p.get(ctx, p.cfg.BaseURL+"/batches/"+url.PathEscape(id), providers.MaxAnswerBytes)
	if err != nil {
		return providers.BatchOutcome{}, err
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return providers.BatchOutcome{}, fmt.Errorf("batch %s: %w", id, err)
	}
	out := providers.BatchOutcome{Status: b.Status}
	switch b.Status {
	case "completed", "failed", "expired", "cancelled":
		out.Done = true
	default:
		return out, nil
	}
	if b.OutputFileID == "" {
		return out, nil // nothing ran (failed validation), or nothing finished
	}
	out.Usage, err = p.outputUsage(ctx, b.OutputFileID)
	return out, err
}

// outputUsage sums an output file's usage by model.
func (p *Provider) outputUsage(ctx context.Context, fileID string) (map[string]providers.Usage, error) {
	resp, perr := p.request(ctx, http.MethodGet, p.cfg.BaseURL+"/files/"+url.PathEscape(fileID)+"/content", nil, &providers.Request{})
	if perr != nil {
		return nil, perr
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("output file %s: status %d", fileID, resp.StatusCode)
	}
	usage := map[string]providers.Usage{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, maxBatchOutput))
	sc.Buffer(make([]byte, 64<<10), maxBatchLine)
	for sc.Scan() {
		body, ok := jsonx.Path(sc.Bytes(), "response", "body")
		if !ok {
			continue // an error line: nothing used
		}
		u, ok := chatUsage(body)
		if !ok {
			continue
		}
		var model string
		if m, ok := jsonx.Member(body, "model"); ok {
			_ = json.Unmarshal(m, &model)
		}
		acc := usage[model]
		acc.InputTokens += u.InputTokens
		acc.OutputTokens += u.OutputTokens
		acc.CachedInputTokens += u.CachedInputTokens
		acc.CachedInInput = u.CachedInInput
		acc.Reported = true
		usage[model] = acc
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("output file %s: %w", fileID, err)
	}
	return usage, nil
}

// get reads a JSON resource whole.
func (p *Provider) get(ctx context.Context, u string, limit int64) ([]byte, error) {
	resp, perr := p.request(ctx, http.MethodGet, u, nil, &providers.Request{})
	if perr != nil {
		return nil, perr
	}
	defer resp.Body.Close()
	body, err := providers.ReadAll(resp.Body, limit)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(u + ": status " + resp.Status)
	}
	return body, nil
}
