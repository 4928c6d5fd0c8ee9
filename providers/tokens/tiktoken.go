package tokens

import (
	"strings"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

func init() {
	// The BPE ranks ship inside the binary: tiktoken-go's default loader
	// downloads them at run time, which must never happen (a Lambda may
	// have no internet, and a cold start must not wait on it).
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
}

// Tiktoken counts with OpenAI's own tokenizers for OpenAI model families
// (o200k_base for gpt-4o, gpt-4.1, gpt-5, o-series; cl100k_base for
// gpt-4, gpt-3.5 and the embedding models) and falls back to Heuristic
// for every other model.
type Tiktoken struct {
	Fallback Estimator
}

// encodings load once, on first use (a few hundred ms each).
var encodings = map[string]*lazyEncoding{
	tiktoken.MODEL_O200K_BASE:  {name: tiktoken.MODEL_O200K_BASE},
	tiktoken.MODEL_CL100K_BASE: {name: tiktoken.MODEL_CL100K_BASE},
}

type lazyEncoding struct {
	name string
	once sync.Once
	enc  *tiktoken.Tiktoken
}

func (l *lazyEncoding) get() *tiktoken.Tiktoken {
	l.once.Do(func() {
		enc, err := tiktoken.GetEncoding(l.name)
		if err == nil {
			l.enc = enc
		}
	})
	return l.enc
}

// Warm loads the tokenizers now rather than on the first request; call it
// at start, outside any request.
func Warm() {
	for _, e := range encodings {
		e.get()
	}
}

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
		return tiktoken.MODEL_O200K_BASE
	case strings.HasPrefix(m, "gpt-4"), strings.HasPrefix(m, "gpt-3.5"), strings.HasPrefix(m, "gpt-35"),
		strings.HasPrefix(m, "text-embedding-3"), strings.HasPrefix(m, "text-embedding-ada-002"):
		return tiktoken.MODEL_CL100K_BASE
	}
	return ""
}

// Count implements Estimator.
func (t Tiktoken) Count(model, text string) int64 {
	if text == "" {
		return 0
	}
	if e := encodings[EncodingFor(model)]; e != nil {
		if enc := e.get(); enc != nil {
			return int64(len(enc.EncodeOrdinary(text)))
		}
	}
	if t.Fallback != nil {
		return t.Fallback.Count(model, text)
	}
	return Heuristic{}.Count(model, text)
}
