package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/providers"
)

// audio sends /v1/audio/{speech,transcriptions,translations}: JSON for
// speech, multipart form data for the others, with the model field set to
// the target's either way.
func (p *Provider) audio(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	op := strings.TrimPrefix(r.Path, "/v1")
	ct := r.Header.Get("Content-Type")
	body := r.Body
	var err error
	if mt, params, perr := mime.ParseMediaType(ct); perr == nil && mt == "multipart/form-data" {
		body, err = setFormModel(r.Body, params["boundary"], r.Model)
	} else {
		body, err = providers.SetModel(r.Body, r.Model, nil)
	}
	if err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Err: err}
	}
	base, path := p.endpoint(r.Model, op)
	return p.raw(ctx, w, r, http.MethodPost, base+path, body)
}

// setFormModel rewrites the "model" field of a multipart form, keeping the
// other parts (the audio file) as they are.
func setFormModel(body []byte, boundary, model string) ([]byte, error) {
	if boundary == "" {
		return nil, errors.New("multipart body without a boundary")
	}
	rd := multipart.NewReader(bytes.NewReader(body), boundary)
	var out bytes.Buffer
	mw := multipart.NewWriter(&out)
	if err := mw.SetBoundary(boundary); err != nil {
		return nil, err
	}
	for {
		part, err := rd.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("multipart body: %w", err)
		}
		pw, err := mw.CreatePart(part.Header)
		if err != nil {
			return nil, err
		}
		if part.FormName() == "model" && model != "" {
			_, err = io.WriteString(pw, model)
		} else {
			_, err = io.Copy(pw, part)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
