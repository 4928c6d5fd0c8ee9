package jsonx

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestMember(t *testing.T) {
	body := []byte(` {"id":"x","choices":[{"message":{"content":"say \"usage\": {}"}}],"usage":{"prompt_tokens":9},"model":"a","usage":{"prompt_tokens":10}} `)
	v, ok := Member(body, "usage")
	if !ok || string(v) != `{"prompt_tokens":10}` {
		t.Fatalf("usage %q %v, want the last one", v, ok)
	}
	if _, ok := Member(body, "missing"); ok {
		t.Fatal("found a missing member")
	}
	if v, ok := Member([]byte(`{"mo\u0064el":"m"}`), "model"); !ok || string(v) != `"m"` {
		t.Fatalf("escaped key: %q %v", v, ok)
	}
	for _, bad := range []string{``, `[]`, `{"a":}`, `{"a":1`, `{"a" 1}`, `{"a":"x}`, `{"a":{"b":1}`, `{a:1}`, `{"a":1,}`} {
		if _, ok := Member([]byte(bad), "a"); ok {
			t.Errorf("%q: found a member in a malformed object", bad)
		}
	}
}

func TestSet(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"model":"a","stream":true}`, `{"model":"b","stream":true,"n":2}`},
		{`{ "stream" : true , "model" : "a" }`, `{ "stream" : true , "model" : "b" ,"n":2}`},
		{`{}`, `{"model":"b","n":2}`},
		{` { } `, ` { "model":"b","n":2} `},
		{`{"n":1,"model":"a","n":3}`, `{"n":2,"model":"b","n":2}`},
	} {
		got, err := Set([]byte(c.in), KV{Key: "model", Value: []byte(`"b"`)}, KV{Key: "n", Value: []byte(`2`)})
		if err != nil || string(got) != c.want {
			t.Errorf("Set(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
		var a, b map[string]any
		if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(c.want), &b) != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("Set(%s) is not the JSON wanted", c.in)
		}
	}
	if _, err := Set([]byte(`not json`), KV{Key: "a", Value: []byte(`1`)}); err == nil {
		t.Fatal("Set on a non-object")
	}
}

// An Edit sees each occurrence's value in order (the last the one a
// decoder keeps) and nil for a member the object lacks, and its result is
// what is set.
func TestSetEdit(t *testing.T) {
	for _, c := range []struct{ in, want, saw string }{
		{`{"a":1,"o":{"x":1}}`, `{"a":1,"o":[{"x":1}]}`, `{"x":1};`},
		{`{"o":1,"a":2,"o":[3]}`, `{"o":[1],"a":2,"o":[[3]]}`, `1;[3];`},
		{`{"a":1}`, `{"a":1,"o":[]}`, `<nil>;`},
		{`{}`, `{"o":[]}`, `<nil>;`},
	} {
		var saw strings.Builder
		got, err := Set([]byte(c.in), KV{Key: "o", Edit: func(old []byte) []byte {
			if old == nil {
				saw.WriteString("<nil>;")
				return []byte(`[]`)
			}
			saw.WriteString(string(old) + ";")
			return []byte("[" + string(old) + "]")
		}})
		if err != nil || string(got) != c.want || saw.String() != c.saw {
			t.Errorf("Set(%s) = %s, %v, saw %s; want %s, saw %s", c.in, got, err, saw.String(), c.want, c.saw)
		}
	}
}

func TestElements(t *testing.T) {
	var got []string
	if err := Elements([]byte(` [1, "a,]", {"b":[2,3]}, null ] `), func(e []byte) bool { got = append(got, string(e)); return true }); err != nil {
		t.Fatal(err)
	}
	if want := []string{`1`, `"a,]"`, `{"b":[2,3]}`, `null`}; !reflect.DeepEqual(got, want) {
		t.Fatalf("%q", got)
	}
}

// Whatever the bytes, the scanner neither panics nor finds a member that
// a JSON decoder would not; and Set of a valid object is valid JSON that
// decodes to the object with the member set.
func FuzzScan(f *testing.F) {
	f.Add([]byte(`{"model":"a","usage":{"x":1}}`))
	f.Add([]byte(`{"a":"\"","b":[{"c":"]"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, ok := Member(b, "usage")
		var obj map[string]json.RawMessage
		valid := json.Unmarshal(b, &obj) == nil
		if valid {
			want, has := obj["usage"]
			if has != ok || (ok && !json.Valid(v)) {
				t.Fatalf("%q: member %q %v, decoder %q %v", b, v, ok, want, has)
			}
			out, err := Set(b, KV{Key: "model", Value: []byte(`"m"`)})
			var got map[string]json.RawMessage
			if err != nil || json.Unmarshal(out, &got) != nil || string(got["model"]) != `"m"` || len(got) != len(obj)+map[bool]int{true: 0, false: 1}[obj["model"] != nil] {
				t.Fatalf("Set(%q) = %q, %v", b, out, err)
			}
		}
	})
}

// skipStringByByte is the scan skipString replaced, byte by byte: the
// reference FuzzSkipString holds its eight-bytes-at-a-time scan to.
func skipStringByByte(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, ErrSyntax
}

func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"a"`, `"\\"x"`, `"\"x"`, `"\\\"x"`, `"abc\\`, `"`, `"\u0022"`, `"\\\\"`, `"abcdefg\\"hijklmnop"`, `"abcdefgh\\\\"x`, `"0123456789abcdef\\u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			return
		}
		got, gerr := skipString(b, 0)
		want, werr := skipStringByByte(b, 0)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Fatalf("skipString(%q) = %d, %v; byte by byte %d, %v", b, got, gerr, want, werr)
		}
	})
}

func BenchmarkMember(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion","created":1741569952,"model":"gpt-4o-2024-08-06",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I assist you today?","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},` +
		`"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},` +
		`"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := Member(body, "usage"); !ok {
			b.Fatal("no usage")
		}
	}
}

func TestDuplicateAndFolded(t *testing.T) {
	for _, c := range []struct {
		body, name, path string
	}{
		{`{"a":1,"b":2}`, "", ""},
		{`{"max_tokens":5000,"max_tokens":1}`, "max_tokens", "max_tokens"},
		{`{"max_tokens":5000,"max\u005ftokens":1}`, "max_tokens", "max_tokens"},
		{`{"messages":[{"role":"user"},{"content":"a","content":"b"}]}`, "content", "messages[1].content"},
		{`{"generationConfig":{"maxOutputTokens":1,"maxOutputTokens":2}}`, "maxOutputTokens", "generationConfig.maxOutputTokens"},
		{`{"MAX_TOKENS":1,"max_tokens":2}`, "", ""}, // not duplicates byte for byte: Folded finds these
	} {
		name, path, found := Duplicate([]byte(c.body))
		if found != (c.name != "") || name != c.name || path != c.path {
			t.Errorf("Duplicate(%s) = %q %q %v, want %q %q", c.body, name, path, found, c.name, c.path)
		}
	}
	if got, want, ok := Folded([]byte(`{"model":"x","MAX_TOKENS":1}`), "max_tokens", "n"); !ok || got != "MAX_TOKENS" || want != "max_tokens" {
		t.Errorf("Folded: %q %q %v", got, want, ok)
	}
	if _, _, ok := Folded([]byte(`{"max_tokens":1,"max\u005ftokens":2}`), "max_tokens"); ok {
		t.Error("an escaped name every decoder reads alike is not folded")
	}
	if got, _, ok := Folded([]byte("{\"max_to\u212aens\":1}"), "max_tokens"); !ok || got != "max_to\u212aens" {
		t.Errorf("the Kelvin sign folds to k, as encoding/json matches: %q %v", got, ok)
	}
}

// foldedByKeyString is Folded as it was, each key unescaped into a string
// and compared with strings.EqualFold: the reference FuzzFolded holds the
// in-place comparison of ASCII keys to.
func foldedByKeyString(obj []byte, names ...string) (got, want string, found bool) {
	_ = Fields(obj, func(k []byte, _, _ int) bool {
		key := keyString(k)
		for _, n := range names {
			if key != n && strings.EqualFold(key, n) {
				got, want, found = key, n, true
				return false
			}
		}
		return true
	})
	return got, want, found
}

func FuzzFolded(f *testing.F) {
	for _, s := range []string{`{"MAX_TOKENS":1}`, `{"model":"a","Stream":true}`, `{"max_tokens":1}`, `{"N":2}`, `{"\u006dodel":1}`, `{"mode\u212a":1}`, `{"max_to[ens":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		names := []string{"model", "stream", "max_tokens", "n", "stream_options"}
		g1, w1, f1 := Folded(b, names...)
		g2, w2, f2 := foldedByKeyString(b, names...)
		if g1 != g2 || w1 != w2 || f1 != f2 {
			t.Fatalf("Folded(%q) = %q %q %v; by key strings %q %q %v", b, g1, w1, f1, g2, w2, f2)
		}
	})
}

// FieldsFrom, from where Fields found a key of one object (not the
// first's), finds in any
// object that begins with the same bytes what Fields finds there from
// that key on, and fails where Fields fails.
func FuzzFieldsFrom(f *testing.F) {
	f.Add(`{"id":"a","object":"chunk","choices":[1],"usage":null}`, `{"id":"a","object":"chunk","choices":[{"d":"x"}],"usage":{"n":1}}`)
	f.Add(`{"id":"a", "choices":[]}`, `{"id":"a",  "choices" : [] , "x":1}`)
	f.Add(`{"id":"a","choices":[]}`, `{"id":"a","choices":`)
	f.Add(`{ "a":1,"b":2}`, `{ "a":1,"b"`)
	f.Add(`{"a":"\"","b":2}`, `{"a":"\"","b":"\\"}`)
	type member struct {
		key        string
		start, end int
	}
	scan := func(obj []byte, from int) ([]member, []int, error) {
		var ms []member
		var keys []int
		fn := func(key []byte, start, end int) bool {
			keys = append(keys, cap(obj)-cap(key))
			ms = append(ms, member{string(key), start, end})
			return true
		}
		if from < 0 {
			return ms, keys, Fields(obj, fn)
		}
		return ms, keys, FieldsFrom(obj, from, fn)
	}
	f.Fuzz(func(t *testing.T, first, next string) {
		a, b := []byte(first), []byte(next)
		_, keys, err := scan(a, -1)
		if err != nil {
			return
		}
		all, bkeys, berr := scan(b, -1)
		for _, k := range keys[min(1, len(keys)):] {
			if !strings.HasPrefix(next, first[:k]) {
				continue
			}
			got, _, gerr := scan(b, k)
			var want []member
			for i, m := range all {
				if bkeys[i] >= k {
					want = append(want, m)
				}
			}
			if (gerr == nil) != (berr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("from %d of %q in %q: %v %v, Fields %v %v", k, first, next, got, gerr, want, berr)
			}
		}
	})
}

// skipContainerByByte is the scan skipContainer replaced, byte by byte:
// the reference FuzzSkipContainer holds its eight-bytes-at-a-time scan to.
func skipContainerByByte(b []byte, i int) (int, error) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			end, err := skipStringByByte(b, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, ErrSyntax
}

// An object or array skipped eight bytes at a time ends where the
// byte-by-byte scan ends it, strings, escapes, brackets in strings and
// bytes that differ from a bracket by one bit (';', '=', '{' and '[' |
// 0x20 …) all included.
func FuzzSkipContainer(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,2,{"b":"]}"}]}`, "{\n  \"choices\": [\n    {\n      \"index\": 0\n    }\n  ]\n}", `[{;}{=};[{]`, `{"a":"\\"}`, `{"a":"\"}`, `[[[[[[[[[[]]]]]]]]]]`, `{ "x" : { "y" : [ ] } } tail`, `[{{`, `{"\u007d":1}`, `[` + strings.Repeat(" ", 20) + `]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || (b[0] != '{' && b[0] != '[') {
			return
		}
		got, gerr := skipContainer(b, 0)
		want, werr := skipContainerByByte(b, 0)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Fatalf("skipContainer(%q) = %d, %v; byte by byte %d, %v", b, got, gerr, want, werr)
		}
	})
}

// Check judges validity as json.Valid does and, of a valid text, finds
// the duplicate the scan of every value finds (looseDuplicate, which
// Duplicate falls back to for a text that is not JSON), with its path.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":2}`, `{"max_tokens":5000,"max_tokens":1}`, `{"max_tokens":5000,"max\u005ftokens":1}`,
		`{"messages":[{"role":"user"},{"content":"a","content":"b"}]}`, `[[{"x":{"y":1,"y":2}}]]`,
		`{"a":-0.5e+3,"b":[true,false,null],"c":"\"\\\/\b\f\n\r\t\u00e9"}`, `{"a":01}`, `{"a":1.}`, `{"a":"\x"}`,
		"{\"a\":\"\x01\"}", `{"a":1,}`, `[1,]`, ` {} `, `"s"`, `12`, `{"k":1} x`, `{"\ud800":1,"\ud800":2}`,
		`{"a":{"b":1},"a":{"b":1}}`, `{"a":"` + strings.Repeat("é", 20) + `"}`,
		`{"1":1,"2":2,"3":3,"4":4,"5":5,"6":6,"7":7,"8":8,"9":9,"10":0,"11":1,"12":2,"13":3,"14":4,"15":5,"16":6,"17":7,"3":3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := Check(b)
		if c.Valid != json.Valid(b) {
			t.Fatalf("Check(%q).Valid = %v, json.Valid %v", b, c.Valid, !c.Valid)
		}
		if !c.Valid {
			return
		}
		name, path, found := looseDuplicate(b)
		if c.Duplicate != found || c.Name != name || c.Path != path {
			t.Fatalf("Check(%q) = %v %q %q, the scan finds %v %q %q", b, c.Duplicate, c.Name, c.Path, found, name, path)
		}
	})
}

// Nesting deeper than encoding/json allows is not valid, as json.Valid
// says; as deep as it allows is.
func TestCheckDepth(t *testing.T) {
	for _, n := range []int{10000, 10001} {
		b := []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
		if got, want := Check(b).Valid, json.Valid(b); got != want {
			t.Errorf("depth %d: Check %v, json.Valid %v", n, got, want)
		}
	}
}

// LastMember finds, in a valid object, the member Member finds, whatever
// the values before and after it hold (brackets and quotes in strings,
// escapes, nesting, space); and so does FirstMember in one that gives
// each member once.
func FuzzLastMember(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","choices":[{"message":{"content":"} ] \" {"}}],"usage":{"prompt_tokens":1},"tier":"default"}`,
		"{\n  \"usage\": {\"a\": [1, {\"b\": \"\\\\\"}]},\n  \"x\": null\n}",
		`{"usage":1,"usage":2}`, `{"us\u0061ge":3,"z":[]}`, `{}`, ` { "a" : "usage" } `, `{"a":{"usage":1}}`,
		`{"a":"\\\\\\"","usage":-1.5e3}`, `{"a":true,"b":false,"c":null,"usage":"s"}`,
	} {
		f.Add([]byte(s), "usage")
	}
	f.Fuzz(func(t *testing.T, obj []byte, key string) {
		if !json.Valid(obj) {
			return
		}
		want, wantOK := Member(obj, key)
		got, gotOK := LastMember(obj, key)
		if gotOK != wantOK || !bytes.Equal(got, want) {
			t.Fatalf("LastMember(%s, %q) = %s %v, Member %s %v", obj, key, got, gotOK, want, wantOK)
		}
		if Check(obj).Duplicate {
			return
		}
		if got, gotOK := FirstMember(obj, key); gotOK != wantOK || !bytes.Equal(got, want) {
			t.Fatalf("FirstMember(%s, %q) = %s %v, Member %s %v", obj, key, got, gotOK, want, wantOK)
		}
	})
}

// BenchmarkCheck reads a chat request as the gateway does before anything
// else (valid JSON, no member twice), in Check's one pass, beside the two
// it replaces (json.Valid, then the scan for duplicates of every value).
func BenchmarkCheck(b *testing.B) {
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},` +
		`{"role":"user","content":"Say hello in five words."}],"max_tokens":32,"tools":[{"type":"function",` +
		`"function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}]}`)
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if c := Check(body); !c.Valid || c.Duplicate {
				b.Fatal(c)
			}
		}
	})
	b.Run("valid+duplicate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, dup := looseDuplicate(body); !json.Valid(body) || dup {
				b.Fatal("not checked")
			}
		}
	})
}

// What an Edit is given ends where the member's value ends: appending to
// it cannot write over the rest of the object.
func TestSetEditCannotWritePastItsValue(t *testing.T) {
	obj := []byte(`{"a":[1],"b":2}`)
	got, err := Set(obj, KV{Key: "a", Edit: func(old []byte) []byte { return append(old, '!') }})
	if err != nil || string(obj) != `{"a":[1],"b":2}` || string(got) != `{"a":[1]!,"b":2}` {
		t.Fatalf("Set = %s, %v; the object is now %s", got, err, obj)
	}
}
