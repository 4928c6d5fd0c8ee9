// Package jsonx finds and replaces members of JSON objects without
// decoding the rest: what the gateway needs of bodies it forwards (the
// usage block of an answer, the model of a request) costs a scan of the
// bytes, not a decode and re-encode of the whole, and everything it does
// not touch goes upstream byte for byte.
//
// The scanner checks structure (strings, nesting, separators), not every
// detail of the grammar: it is for bodies a JSON decoder has accepted, or
// that the upstream will judge.
package jsonx

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// ErrSyntax is returned for a body that is not a JSON object (or array).
var ErrSyntax = errors.New("jsonx: not a JSON value of the expected shape")

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && space(b[i]) {
		i++
	}
	return i
}

// skipString returns the end of the string starting at b[i] == '"': the
// first quote after it not escaped. The bytes are looked at eight at a
// time (quoteOrEscape), then one by one at a quote or a backslash and in
// the last few: strings are most of a chat's bytes.
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for j < len(b) {
		if j+8 <= len(b) {
			m := quoteOrEscape(binary.LittleEndian.Uint64(b[j:]))
			if m == 0 {
				j += 8
				continue
			}
			j += bits.TrailingZeros64(m) >> 3
		}
		switch b[j] {
		case '\\':
			j += 2
		case '"':
			return j + 1, nil
		default:
			j++
		}
	}
	return 0, ErrSyntax
}

// quoteOrEscape marks, in the high bit of each byte, the bytes of w that
// are '"' or '\\'. Its lowest mark is always the first such byte (a byte
// after it may be marked wrongly, by the borrow: only the lowest is read).
func quoteOrEscape(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, e := w^(ones*'"'), w^(ones*'\\')
	return ((q-ones)&^q | (e-ones)&^e) & highs
}

// skipContainer returns the end of the object or array starting at b[i]:
// where its brackets balance, strings skipped. The bytes between are
// looked at eight at a time (brackets): an answer's indentation and
// numbers are most of what it skips.
func skipContainer(b []byte, i int) (int, error) {
	depth := 0
	for j := i; j < len(b); {
		if j+8 <= len(b) {
			m := brackets(binary.LittleEndian.Uint64(b[j:]))
			if m == 0 {
				j += 8
				continue
			}
			j += bits.TrailingZeros64(m) >> 3
		}
		switch b[j] {
		case '"':
			end, err := skipString(b, j)
			if err != nil {
				return 0, err
			}
			j = end
		case '{', '[':
			depth++
			j++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1, nil
			}
			j++
		default:
			j++
		}
	}
	return 0, ErrSyntax
}

// brackets marks, as quoteOrEscape does, the bytes of w that are '"',
// '{', '[', '}' or ']' (a byte with the 0x20 bit set is '{' or '}' only
// if it was that or '[' or ']').
func brackets(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	f := w | ones*0x20
	q, o, c := w^(ones*'"'), f^(ones*'{'), f^(ones*'}')
	return ((q-ones)&^q | (o-ones)&^o | (c-ones)&^c) & highs
}

// skipValue returns the end of the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, ErrSyntax
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		return skipContainer(b, i)
	}
	j := i
	for j < len(b) && !space(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	if j == i {
		return 0, ErrSyntax
	}
	return j, nil
}

// keyEquals reports whether the raw JSON string s (quotes included) is key.
func keyEquals(s []byte, key string) bool {
	inner := s[1 : len(s)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == key
	}
	var k string
	return json.Unmarshal(s, &k) == nil && k == key
}

// Fields calls fn with each member of the object obj: its raw key (with
// quotes) and the span of its raw value. fn returns false to stop.
func Fields(obj []byte, fn func(key []byte, start, end int) bool) error {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ErrSyntax
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	if i >= len(obj) || obj[i] != '"' {
		return ErrSyntax
	}
	return FieldsFrom(obj, i, fn)
}

// FieldsFrom is Fields from the member whose key starts at obj[i]: where
// Fields found the key of a member after the first of an object that
// began with the same bytes up to i, so that a run of objects sharing
// their first members (the chunks of one stream) skips them. Of an i
// that is not such a place it says nothing more than that it may fail.
func FieldsFrom(obj []byte, i int, fn func(key []byte, start, end int) bool) error {
	if i < 0 {
		return ErrSyntax
	}
	i = skipSpace(obj, i) // as Fields goes on after a comma
	for {
		if i >= len(obj) || obj[i] != '"' {
			return ErrSyntax
		}
		kend, err := skipString(obj, i)
		if err != nil {
			return err
		}
		key := obj[i:kend]
		i = skipSpace(obj, kend)
		if i >= len(obj) || obj[i] != ':' {
			return ErrSyntax
		}
		start := skipSpace(obj, i+1)
		end, err := skipValue(obj, start)
		if err != nil {
			return err
		}
		if !fn(key, start, end) {
			return nil
		}
		i = skipSpace(obj, end)
		if i >= len(obj) {
			return ErrSyntax
		}
		switch obj[i] {
		case ',':
			i = skipSpace(obj, i+1)
		case '}':
			return nil
		default:
			return ErrSyntax
		}
	}
}

// Member returns the raw value of the member key of the object obj (the
// last, if it appears more than once, as a decoder would take it).
func Member(obj []byte, key string) ([]byte, bool) { return member(obj, key, false) }

// FirstMember is Member for an object that gives each member once
// (Check): the scan stops at the first member named key.
func FirstMember(obj []byte, key string) ([]byte, bool) { return member(obj, key, true) }

// member finds the member key of obj: the last, or the first when first
// is set.
func member(obj []byte, key string, first bool) ([]byte, bool) {
	var v []byte
	found := false
	err := Fields(obj, func(k []byte, start, end int) bool {
		if keyEquals(k, key) {
			v, found = obj[start:end], true
			return !first
		}
		return true
	})
	return v, found && err == nil
}

// Elements calls fn with each element of the array arr. fn returns false
// to stop.
func Elements(arr []byte, fn func(elem []byte) bool) error {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return ErrSyntax
	}
	i = skipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return nil
	}
	for {
		end, err := skipValue(arr, i)
		if err != nil {
			return err
		}
		if !fn(arr[i:end]) {
			return nil
		}
		i = skipSpace(arr, end)
		if i >= len(arr) {
			return ErrSyntax
		}
		switch arr[i] {
		case ',':
			i = skipSpace(arr, i+1)
		case ']':
			return nil
		default:
			return ErrSyntax
		}
	}
}

// KV is one member to set: a key and its raw JSON value.
type KV struct {
	Key   string
	Value []byte
	// Edit, when set, gives the value in place of Value from the one the
	// member has (nil where the object has none), in the same pass: it is
	// called for each occurrence, the last the one a decoder keeps, or
	// once for a member added. old is the object's: read, not written.
	Edit func(old []byte) []byte
}

// value is the value kv sets where the member's is old.
func (kv *KV) value(old []byte) []byte {
	if kv.Edit != nil {
		return kv.Edit(old)
	}
	return kv.Value
}

// Set returns obj with each member in set given its value: replaced where
// the key is (every occurrence), added at the end where it is not. The
// rest of obj is kept byte for byte.
func Set(obj []byte, set ...KV) ([]byte, error) {
	// A span is a member's value and which of set replaces it: the new
	// value is made as the output is written, so that nothing of set is
	// kept (an Edit and what it holds stay the caller's).
	type span struct{ start, end, kv int }
	var spans []span
	seen := make([]bool, len(set))
	members := 0
	err := Fields(obj, func(k []byte, start, end int) bool {
		members++
		for j := range set {
			if keyEquals(k, set[j].Key) {
				spans = append(spans, span{start, end, j})
				seen[j] = true
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	closing := bytes.LastIndexByte(obj, '}')
	out := make([]byte, 0, len(obj)+64)
	at := 0
	for _, sp := range spans {
		out = append(out, obj[at:sp.start]...)
		out = append(out, set[sp.kv].value(obj[sp.start:sp.end:sp.end])...) // an Edit cannot write past it
		at = sp.end
	}
	out = append(out, obj[at:closing]...)
	empty := members == 0
	for j := range set {
		if seen[j] {
			continue
		}
		if !empty {
			out = append(out, ',')
		}
		empty = false
		out = appendKey(out, set[j].Key)
		out = append(out, ':')
		out = append(out, set[j].value(nil)...)
	}
	return append(out, obj[closing:]...), nil
}

// appendKey appends key as a JSON string: as it is between quotes when
// nothing in it needs escaping, else as encoding/json writes it.
func appendKey(out []byte, key string) []byte {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			// A copy goes to the encoder: key itself is not kept (nor,
			// so, the KV it came from; see Set).
			b, _ := json.Marshal(strings.Clone(key))
			return append(out, b...)
		}
	}
	out = append(out, '"')
	out = append(out, key...)
	return append(out, '"')
}

// Int returns the integer member key of the object obj; absent, null or
// not an integer is 0 and false.
func Int(obj []byte, key string) (int64, bool) {
	v, ok := Member(obj, key)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// ParseInt reads a raw JSON integer; anything else is 0.
func ParseInt(v []byte) int64 {
	n, _ := strconv.ParseInt(string(v), 10, 64)
	return n
}

// Path returns the raw value at a path of object members.
func Path(obj []byte, keys ...string) ([]byte, bool) {
	v := obj
	for _, k := range keys {
		var ok bool
		if v, ok = Member(v, k); !ok {
			return nil, false
		}
	}
	return v, true
}

// keyString returns the member name the raw JSON string s (quotes
// included) holds, unescaped as a decoder reads it.
func keyString(s []byte) string {
	inner := s[1 : len(s)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner)
	}
	var k string
	if json.Unmarshal(s, &k) != nil {
		return string(inner)
	}
	return k
}

// plainASCIIKey reports whether a raw key's inside is ASCII with no escape.
func plainASCIIKey(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}

// asciiFoldedOnly reports whether the ASCII bytes b spell the ASCII name n
// but for case, and not exactly.
func asciiFoldedOnly(b []byte, n string) bool {
	if len(b) != len(n) || string(b) == n {
		return false
	}
	for i := range len(b) {
		x, y := b[i], n[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// Duplicate returns the first member name that appears twice in one
// object anywhere in the JSON value b (names compared as a decoder
// unescapes them, exactly), and its path ("messages[0].content"). Parsers
// read duplicates differently (the last wins in Go and most, the first in
// some): a body with one cannot be read one way for sure. The scan is
// linear in the body.
func Duplicate(b []byte) (name, path string, found bool) {
	if c := Check(b); c.Valid {
		return c.Name, c.Path, c.Duplicate
	}
	return looseDuplicate(b)
}

// looseDuplicate is Duplicate for any text, valid JSON or not: the
// duplicate scanned for in the values that can be told apart.
func looseDuplicate(b []byte) (name, path string, found bool) {
	name, parts, found := duplicate(b, nil)
	if !found {
		return "", "", false
	}
	slices.Reverse(parts)
	var sb strings.Builder
	for _, p := range parts {
		if !p.index && sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(p.s)
	}
	return name, sb.String(), true
}

// pathPart is a step of Duplicate's path: a member's name, or an
// element's index ("[3]").
type pathPart struct {
	s     string
	index bool
}

// duplicate finds Duplicate's member in v; the path to it is returned
// innermost step first, built only once one is found: the scan of a body
// without one allocates nothing but for escaped names.
func duplicate(v []byte, parts []pathPart) (string, []pathPart, bool) {
	i := skipSpace(v, 0)
	if i >= len(v) {
		return "", parts, false
	}
	name, dup := "", false
	switch v[i] {
	case '{':
		var buf [16][]byte
		seen := buf[:0]
		var set map[string]bool // past a few members, a set
		_ = Fields(v, func(k []byte, start, end int) bool {
			key := k[1 : len(k)-1]
			if bytes.IndexByte(key, '\\') >= 0 {
				key = []byte(keyString(k))
			}
			switch {
			case set != nil:
				dup = set[string(key)]
				set[string(key)] = true
			default:
				for _, s := range seen {
					dup = dup || bytes.Equal(s, key)
				}
				if seen = append(seen, key); len(seen) > 16 {
					set = make(map[string]bool, 2*len(seen))
					for _, s := range seen {
						set[string(s)] = true
					}
				}
			}
			if dup {
				name = string(key)
				parts = append(parts, pathPart{s: name})
				return false
			}
			if name, parts, dup = duplicate(v[start:end], parts); dup {
				parts = append(parts, pathPart{s: string(key)})
			}
			return !dup
		})
	case '[':
		n := 0
		_ = Elements(v, func(e []byte) bool {
			if name, parts, dup = duplicate(e, parts); dup {
				parts = append(parts, pathPart{s: "[" + strconv.Itoa(n) + "]", index: true})
			}
			n++
			return !dup
		})
	}
	return name, parts, dup
}

// Folded returns the first member of the object obj whose name (as a
// decoder unescapes it) equals one of names but for case ("MAX_TOKENS"
// for "max_tokens", as Unicode folds it, as encoding/json matches): a
// decoder that ignores case reads it as the name, one that does not
// ignores it.
func Folded(obj []byte, names ...string) (got, want string, found bool) {
	_ = Fields(obj, func(k []byte, _, _ int) bool {
		if inner := k[1 : len(k)-1]; plainASCIIKey(inner) {
			// Two ASCII strings fold alike exactly when their letters
			// match but for case: compared in place, nothing allocated.
			for _, n := range names {
				if asciiFoldedOnly(inner, n) {
					got, want, found = string(inner), n, true
					return false
				}
			}
			return true
		}
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
