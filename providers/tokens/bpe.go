package tokens

import (
	"strings"
	"sync"

	"github.com/tollgate/tollgate/providers/tokens/bpe"
)

// BPE counts with the byte-pair encodings of OpenAI model families
// (o200k_base for gpt-4o, gpt-4.1, gpt-5, o-series; cl100k_base for
// gpt-4, gpt-3.5 and the embedding models), through tollgate's own
// tokenizer (package bpe), which counts what tiktoken counts; every other
// model falls back to Fallback, or Heuristic. The encodings' tables are
// part of the binary and need no loading; counting is linear in the text.
type BPE struct {
	Fallback Estimator
}

// Encoding names.
const (
	O200K  = "o200k_base"
	CL100K = "cl100k_base"
)

// EncodingFor names the tokenizer of an OpenAI model family, or "".
func EncodingFor(model string) string {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:] // "openai/gpt-4o" and deployment-style prefixes
	}
	switch {
	case strings.HasPrefix(m, "gpt-4o"), strings.HasPrefix(m, "gpt-4.1"), strings.HasPrefix(m, "gpt-4.5"),
		strings.HasPrefix(m, "gpt-5"), strings.HasPrefix(m, "chatgpt-4o"), strings.HasPrefix(m, "gpt-oss"),
		strings.HasPrefix(m, "o1"), strings.HasPrefix(m, "o3"), strings.HasPrefix(m, "o4"):
		return O200K
	case strings.HasPrefix(m, "gpt-4"), strings.HasPrefix(m, "gpt-3.5"), strings.HasPrefix(m, "gpt-35"),
		strings.HasPrefix(m, "text-embedding-3"), strings.HasPrefix(m, "text-embedding-ada-002"):
		return CL100K
	}
	return ""
}

// encoding returns the tokenizer of name and what it counted lately, or
// nil.
func encoding(name string) (*bpe.Encoding, *counted) {
	var e *bpe.Encoding
	var c *counted
	switch name {
	case O200K:
		e, _ = bpe.O200K()
		c = countedO200K()
	case CL100K:
		e, _ = bpe.CL100K()
		c = countedCL100K()
	}
	if e == nil {
		return nil, nil
	}
	return e, c
}

// What each encoding counted lately, made at its first count.
var (
	countedO200K  = sync.OnceValue(newCounted)
	countedCL100K = sync.OnceValue(newCounted)
)

// Count implements Estimator. A text counted lately is found by its hash
// rather than counted again (see counted).
func (t BPE) Count(model, text string) int64 {
	if text == "" {
		return 0
	}
	if e, c := encoding(EncodingFor(model)); e != nil {
		if n, ok := c.get(text); ok {
			return n
		}
		n := int64(e.Count(text))
		c.put(text, n)
		return n
	}
	if t.Fallback != nil {
		return t.Fallback.Count(model, text)
	}
	return Heuristic{}.Count(model, text)
}
