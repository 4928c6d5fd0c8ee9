package openai

import (
	"bytes"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/jsonx"
	"github.com/tollgate/tollgate/providers/sse"
)

// usage is OpenAI's usage block, in both of its shapes: chat completions
// and embeddings (prompt/completion tokens), and the Responses API
// (input/output tokens).
type usage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// toUsage converts; OpenAI counts cached prompt tokens towards its limits,
// so they stay in InputTokens and are also reported apart.
func (u *usage) toUsage() providers.Usage {
	return providers.Usage{
		InputTokens:       u.PromptTokens + u.InputTokens,
		OutputTokens:      u.CompletionTokens + u.OutputTokens,
		CachedInputTokens: u.PromptTokensDetails.CachedTokens + u.InputTokensDetails.CachedTokens,
		CachedInInput:     true,
		Reported:          true,
	}
}

// chatUsage reads the usage block of a whole chat completion, embedding
// answer or stream chunk, decoding nothing else of it: read from the
// answer's end, where OpenAI puts it, after the choices.
func chatUsage(body []byte) (providers.Usage, bool) {
	raw, ok := jsonx.LastMember(body, "usage")
	if !ok {
		return providers.Usage{}, false
	}
	return parseUsage(raw)
}

// headUsage is chatUsage of the start of an answer that may be cut short
// (providers.Pass keeps the first MiB): read from its start, so that a cut
// answer has none (from where it was cut, an object inside it could pass
// for the answer).
func headUsage(head []byte) (providers.Usage, bool) {
	raw, ok := jsonx.Member(head, "usage")
	if !ok {
		return providers.Usage{}, false
	}
	return parseUsage(raw)
}

// parseUsage reads a usage object's counts (either shape) without a
// decoder: a handful of member lookups.
func parseUsage(raw []byte) (providers.Usage, bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return providers.Usage{}, false
	}
	var u usage
	err := jsonx.Fields(raw, func(key []byte, start, end int) bool {
		v := raw[start:end]
		switch string(key) {
		case `"prompt_tokens"`:
			u.PromptTokens = jsonx.ParseInt(v)
		case `"completion_tokens"`:
			u.CompletionTokens = jsonx.ParseInt(v)
		case `"input_tokens"`:
			u.InputTokens = jsonx.ParseInt(v)
		case `"output_tokens"`:
			u.OutputTokens = jsonx.ParseInt(v)
		case `"prompt_tokens_details"`:
			u.PromptTokensDetails.CachedTokens, _ = jsonx.Int(v, "cached_tokens")
		case `"input_tokens_details"`:
			u.InputTokensDetails.CachedTokens, _ = jsonx.Int(v, "cached_tokens")
		}
		return true
	})
	return u.toUsage(), err == nil
}

// hasOutput reports whether a chunk's choices carry output: a delta with
// content, tool calls or a refusal.
//
// Most chunks carry text, written compactly: `"content":"` then a
// character other than the closing quote is text, without a scan of the
// chunk's structure. (That byte sequence cannot be inside a JSON string,
// whose quotes are escaped, and in a chunk's choices only a delta's
// content is a string named so.) Anything else is read member by member.
func hasOutput(choices []byte) bool {
	if i := bytes.Index(choices, textStart); i >= 0 && i+len(textStart) < len(choices) && choices[i+len(textStart)] != '"' {
		return true
	}
	found := false
	_ = jsonx.Elements(choices, func(ch []byte) bool {
		delta, ok := jsonx.Member(ch, "delta")
		if !ok {
			return true
		}
		_ = jsonx.Fields(delta, func(key []byte, start, end int) bool {
			switch string(key) {
			case `"content"`, `"tool_calls"`, `"refusal"`:
				found = !empty(delta[start:end])
			}
			return !found
		})
		return !found
	})
	return found
}

var textStart = []byte(`"content":"`)

// empty reports whether a raw JSON value is null, "" or [].
func empty(v []byte) bool {
	s := string(bytes.TrimSpace(v))
	return s == "null" || s == `""` || s == "[]"
}

// responsesUsage reads the usage of a Responses API answer.
func responsesUsage(body []byte) (providers.Usage, bool) {
	return chatUsage(body)
}

// chatStream sees one chunk of a chat completion stream: the usage chunk
// (no choices) sets the usage, and is passed on only if the client asked
// for it; content chunks count output as it goes, so a broken stream still
// reports what it delivered.
func chatStream(ev sse.Event, res *providers.Result, clientWantsUsage bool, seen *chunkStart) bool {
	if bytes.Equal(ev.Data, []byte("[DONE]")) {
		return true
	}
	if countWithoutUsage(ev.Data, res, seen) {
		return true
	}
	return chatStreamScan(ev, res, clientWantsUsage, seen)
}

// countWithoutUsage counts in res the output of a chunk with no usage
// when outputWithoutUsage can tell it, looked at from where the members
// the stream's chunks share end (chunkStart, learnt from the first), and
// reports whether it could.
func countWithoutUsage(data []byte, res *providers.Result, seen *chunkStart) bool {
	from := seen.in(data)
	if from == 0 {
		from = seen.learn(data)
	}
	output, known := outputWithoutUsage(data[from:])
	if output && !res.Usage.Reported {
		res.Usage.OutputTokens++ // about one token a chunk, until the real count arrives
	}
	return known
}

// outputWithoutUsage tells, without a scan of its structure, whether a
// chunk with no usage carries output, from the members after those its
// stream's chunks share; known is false when it cannot be told so, and
// the chunk's members are read.
//
// A chunk has no usage when it ends with "usage":null, as every chunk but
// the last does once the gateway asks for usage. It carries text when it
// holds `"content":"` then a character other than the closing quote (in a
// chunk only a delta's content is a string so named: see hasOutput), and
// none when every "content" and "refusal" it holds is "" or null and it
// holds no "tool_calls". Like the rest of the package, it takes the
// upstream's JSON to be valid.
func outputWithoutUsage(data []byte) (output, known bool) {
	if !bytes.HasSuffix(data, usageNull) {
		return false, false
	}
	empty := true
	for _, name := range [...][]byte{contentName, refusalName} {
		for rest := data; ; {
			i := indexName(rest, name)
			if i < 0 {
				break
			}
			rest = rest[i+len(name):]
			switch {
			case bytes.HasPrefix(rest, emptyString), bytes.HasPrefix(rest, nullValue):
			case len(name) == len(contentName) && len(rest) > 2 && rest[0] == ':' && rest[1] == '"':
				return true, true // `"content":"` and a character: text
			default:
				empty = false
			}
		}
	}
	if !empty || indexName(data, toolCallsName) >= 0 {
		return false, false
	}
	return false, true
}

// indexName is bytes.Index(b, name) for a name in quotes (`"content"`),
// looked for from its first letter: a chunk holds a quote at every key
// and value, the letter far less often, so the search stops at fewer
// places (TestIndexNameIsIndex).
func indexName(b, name []byte) int {
	for at := 0; ; {
		i := bytes.Index(b[at:], name[1:])
		if i < 0 {
			return -1
		}
		if j := at + i; j > 0 && b[j-1] == name[0] {
			return j - 1
		}
		at += i + 1
	}
}

var (
	usageNull     = []byte(`,"usage":null}`)
	contentName   = []byte(`"content"`)
	refusalName   = []byte(`"refusal"`)
	toolCallsName = []byte(`"tool_calls"`)
	emptyString   = []byte(`:""`)
	nullValue     = []byte(`:null`)
)

// plainChunks is the length of the run of whole chunks at the start of b
// (what a relay has read and not returned) that need no look one by one,
// and counts their output in res as chatStream would: each a "data: "
// line and a blank line, as OpenAI writes them, of [DONE] or of a chunk
// whose output countWithoutUsage can tell (TestPlainChunksAsEventByEvent
// holds a relay that passes such runs on as they arrived to one that
// reads every event).
func plainChunks(b []byte, res *providers.Result, seen *chunkStart) int {
	n := 0
	for {
		rest := b[n:]
		if !bytes.HasPrefix(rest, dataField) {
			return n
		}
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 || nl+1 >= len(rest) || rest[nl+1] != '\n' {
			return n
		}
		if data := rest[len(dataField):nl]; string(data) != "[DONE]" && !countWithoutUsage(data, res, seen) {
			return n
		}
		n += nl + 2
	}
}

var dataField = []byte("data: ")

// chatStreamScan is chatStream for any chunk: its members read.
func chatStreamScan(ev sse.Event, res *providers.Result, clientWantsUsage bool, seen *chunkStart) bool {
	// One pass over the chunk for its choices and its usage, from where
	// the members the stream's chunks share end.
	var choices, usageRaw []byte
	at, members, from := -1, 0, seen.in(ev.Data)
	scan := func(key []byte, start, end int) bool {
		members++
		switch string(key) {
		case `"choices"`:
			choices = ev.Data[start:end]
		case `"usage"`:
			usageRaw = ev.Data[start:end]
		default:
			return true
		}
		if at < 0 {
			at = 0 // the first member is read: nothing to skip
			if members > 1 {
				at = cap(ev.Data) - cap(key) // where the key starts: key is a slice of ev.Data
			}
		}
		return true
	}
	if from > 0 {
		_ = jsonx.FieldsFrom(ev.Data, from, scan)
	} else if jsonx.Fields(ev.Data, scan) == nil && at > 0 {
		seen.remember(ev.Data, at)
	}
	if u, ok := parseUsage(usageRaw); ok {
		res.Usage = u
		if len(choices) == 0 || empty(choices) {
			return clientWantsUsage
		}
		return true
	}
	if len(choices) > 0 && !res.Usage.Reported && hasOutput(choices) {
		res.Usage.OutputTokens++ // about one token a chunk, until the real count arrives
	}
	return true
}

// chunkStart is how a stream's chunks begin before the first member
// chatStream reads (choices or usage): the members they share (id,
// object, created, model, …), scanned in the first chunk only.
type chunkStart struct {
	// The start kept: in short, where it fits (OpenAI's is under 200
	// bytes), with no allocation; else in long.
	short  [256]byte
	n      int
	long   []byte
	learnt bool // learn has looked (once a stream)
}

// prefix is the start kept.
func (c *chunkStart) prefix() []byte {
	if c.long != nil {
		return c.long
	}
	return c.short[:c.n]
}

// in returns where the members after the shared start begin in data: 0
// when data does not begin with the same bytes.
func (c *chunkStart) in(data []byte) int {
	if c == nil {
		return 0
	}
	p := c.prefix()
	if len(p) == 0 || !bytes.HasPrefix(data, p) {
		return 0
	}
	return len(p)
}

// learn remembers, once a stream, where the members data shares with
// the stream's next chunks end: before its first member chatStream reads
// (choices or usage), found by a scan of the members before it. It
// returns that place, 0 when there is none.
func (c *chunkStart) learn(data []byte) int {
	if c == nil || c.learnt {
		return 0
	}
	c.learnt = true
	at, members := 0, 0
	_ = jsonx.Fields(data, func(key []byte, _, _ int) bool {
		members++
		if string(key) != `"choices"` && string(key) != `"usage"` {
			return true
		}
		if members > 1 {
			at = cap(data) - cap(key) // where the key starts: key is a slice of data
		}
		return false
	})
	if at > 0 {
		c.remember(data, at)
	}
	return at
}

// remember keeps data up to at, where its first member chatStream reads
// begins (data is valid only until the stream's next event).
func (c *chunkStart) remember(data []byte, at int) {
	if c != nil {
		if at <= len(c.short) {
			c.n, c.long = copy(c.short[:], data[:at]), nil
			return
		}
		c.long = append(c.long[:0], data[:at]...)
	}
}

// responsesStream sees one event of a Responses API stream: the usage is in
// response.completed (or .incomplete / .failed).
func responsesStream(ev sse.Event, res *providers.Result) bool {
	switch ev.Name {
	case "response.completed", "response.incomplete", "response.failed":
		if raw, ok := jsonx.Path(ev.Data, "response", "usage"); ok {
			if u, ok := parseUsage(raw); ok {
				res.Usage = u
			}
		}
	case "response.output_text.delta":
		if !res.Usage.Reported {
			res.Usage.OutputTokens++
		}
	}
	return true
}
