package proxy

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/providers"
)

// needsOf reads what a request body needs of a model, for admission's
// compatibility check before any target but the first choice: tools,
// image or audio input, a JSON schema for the output. It is read only
// when such a target is considered; a body it cannot read needs nothing
// more than its route parsed.
func needsOf(op providers.Op, body []byte) admission.Needs {
	switch op {
	case providers.OpChat:
		return chatNeeds(body)
	case providers.OpResponses:
		return responsesNeeds(body)
	case providers.OpMessages:
		return messagesNeeds(body)
	case providers.OpGenerate:
		return generateNeeds(body)
	}
	return admission.Needs{}
}

// given reports whether a JSON value is there and not empty.
func given(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && !bytes.Equal(v, []byte("null")) && !bytes.Equal(v, []byte("[]")) && !bytes.Equal(v, []byte("{}"))
}

// partNeeds adds what content parts of the given types need.
func partNeeds(n *admission.Needs, content json.RawMessage) {
	var parts []struct {
		Type   string `json:"type"`
		Source *struct {
			MediaType string `json:"media_type"`
		} `json:"source"`
	}
	if len(content) == 0 || content[0] != '[' || json.Unmarshal(content, &parts) != nil {
		return
	}
	for _, p := range parts {
		switch p.Type {
		case "image_url", "input_image", "image", "document", "input_file", "file":
			n.Vision = true
		case "input_audio", "audio":
			n.Audio = true
		}
	}
}

func chatNeeds(body []byte) admission.Needs {
	var b struct {
		Tools          json.RawMessage `json:"tools"`
		Functions      json.RawMessage `json:"functions"`
		ResponseFormat struct {
			Type string `json:"type"`
		} `json:"response_format"`
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	var n admission.Needs
	if json.Unmarshal(body, &b) != nil {
		return n
	}
	n.Tools = given(b.Tools) || given(b.Functions)
	n.StructuredOutput = b.ResponseFormat.Type == "json_schema"
	for _, m := range b.Messages {
		partNeeds(&n, bytes.TrimSpace(m.Content))
	}
	return n
}

func responsesNeeds(body []byte) admission.Needs {
	var b struct {
		Tools json.RawMessage `json:"tools"`
		Text  struct {
			Format struct {
				Type string `json:"type"`
			} `json:"format"`
		} `json:"text"`
		Input json.RawMessage `json:"input"`
	}
	var n admission.Needs
	if json.Unmarshal(body, &b) != nil {
		return n
	}
	n.Tools = given(b.Tools)
	n.StructuredOutput = b.Text.Format.Type == "json_schema"
	var items []struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	if in := bytes.TrimSpace(b.Input); len(in) > 0 && in[0] == '[' && json.Unmarshal(in, &items) == nil {
		partNeeds(&n, in) // parts given as items
		for _, it := range items {
			partNeeds(&n, bytes.TrimSpace(it.Content))
		}
	}
	return n
}

func messagesNeeds(body []byte) admission.Needs {
	var b struct {
		Tools        json.RawMessage `json:"tools"`
		OutputFormat struct {
			Type string `json:"type"`
		} `json:"output_format"`
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	var n admission.Needs
	if json.Unmarshal(body, &b) != nil {
		return n
	}
	n.Tools = given(b.Tools)
	n.StructuredOutput = b.OutputFormat.Type == "json_schema"
	for _, m := range b.Messages {
		partNeeds(&n, bytes.TrimSpace(m.Content))
	}
	return n
}

// geminiBlob is an inline or file part of Gemini's, in either spelling.
type geminiBlob struct {
	MimeType  string `json:"mimeType"`
	MimeType2 string `json:"mime_type"`
}

func (g *geminiBlob) kind() string { return strings.ToLower(g.MimeType + g.MimeType2) }

func generateNeeds(body []byte) admission.Needs {
	type genConfig struct {
		ResponseSchema      json.RawMessage `json:"responseSchema"`
		ResponseSchema2     json.RawMessage `json:"response_schema"`
		ResponseJSONSchema  json.RawMessage `json:"responseJsonSchema"`
		ResponseJSONSchema2 json.RawMessage `json:"response_json_schema"`
	}
	var b struct {
		Tools    json.RawMessage `json:"tools"`
		Config   *genConfig      `json:"generationConfig"`
		Config2  *genConfig      `json:"generation_config"`
		Contents []struct {
			Parts []struct {
				InlineData  *geminiBlob `json:"inlineData"`
				InlineData2 *geminiBlob `json:"inline_data"`
				FileData    *geminiBlob `json:"fileData"`
				FileData2   *geminiBlob `json:"file_data"`
			} `json:"parts"`
		} `json:"contents"`
	}
	var n admission.Needs
	if json.Unmarshal(body, &b) != nil {
		return n
	}
	n.Tools = given(b.Tools)
	for _, c := range []*genConfig{b.Config, b.Config2} {
		if c != nil && (given(c.ResponseSchema) || given(c.ResponseSchema2) || given(c.ResponseJSONSchema) || given(c.ResponseJSONSchema2)) {
			n.StructuredOutput = true
		}
	}
	for _, c := range b.Contents {
		for _, p := range c.Parts {
			for _, blob := range []*geminiBlob{p.InlineData, p.InlineData2, p.FileData, p.FileData2} {
				if blob == nil {
					continue
				}
				switch k := blob.kind(); {
				case strings.HasPrefix(k, "audio/"):
					n.Audio = true
				case k != "" && !strings.HasPrefix(k, "text/"):
					n.Vision = true // images, video, documents
				}
			}
		}
	}
	return n
}
