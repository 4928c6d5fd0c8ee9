// Package bpe is tollgate's tokenizer: OpenAI's o200k_base and
// cl100k_base byte-pair encodings, counting exactly what tiktoken counts,
// in time linear in the text (n log n for one unbroken word) and with no
// work at start: the rank tables are embedded in the binary in the form
// the lookups use in place (see gen), so loading one is reading a header.
//
// Encoding splits the text as tiktoken's pattern does (a hand-written
// scanner with the same leftmost-alternative, greedy-with-backtracking
// semantics, no regular expression engine), then merges each piece's bytes
// as tiktoken does: repeatedly the adjacent pair of lowest rank, the
// leftmost of equal ones. Short pieces are merged by scanning; long ones
// through a heap, so a megabyte without a space is not quadratic.
package bpe

//go:generate go run ./gen

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// Table layout; see gen.
const (
	Magic      = "tgbpe\x00\x01\x00"
	HeaderSize = 24
	// MaxRanks is the most ranks a table can hold: a slot keeps rank+1 in
	// 18 bits.
	MaxRanks = 1<<18 - 2

	rankBits = 18
	rankMask = 1<<rankBits - 1
)

var (
	//go:embed o200k_base.bpe
	o200kData []byte
	//go:embed cl100k_base.bpe
	cl100kData []byte
)

// Encoding is one byte-pair encoding: its rank table and its pattern.
type Encoding struct {
	name    string
	match   func(text string, i int) int // the end of the piece at i
	n       uint32
	mask    uint32 // table size − 1
	longest int
	offsets []byte // (n+1) uint32
	table   []byte // size uint32 slots
	blob    []byte
}

var (
	o200k, cl100k        *Encoding
	o200kErr, cl100kErr  error
	o200kOnce, cl100Once sync.Once
)

// O200K is o200k_base (gpt-4o, gpt-4.1, gpt-5, o-series).
func O200K() (*Encoding, error) {
	o200kOnce.Do(func() { o200k, o200kErr = load("o200k_base", o200kData, matchO200K) })
	return o200k, o200kErr
}

// CL100K is cl100k_base (gpt-4, gpt-3.5, text-embedding-3).
func CL100K() (*Encoding, error) {
	cl100Once.Do(func() { cl100k, cl100kErr = load("cl100k_base", cl100kData, matchCL100K) })
	return cl100k, cl100kErr
}

func load(name string, data []byte, match func(string, int) int) (*Encoding, error) {
	bad := errors.New("bpe: " + name + ": malformed table (run go generate ./providers/tokens/bpe)")
	if len(data) < HeaderSize || string(data[:8]) != Magic {
		return nil, bad
	}
	u := func(i int) uint32 { return binary.LittleEndian.Uint32(data[8+4*i:]) }
	n, size, longest := u(0), u(1), u(2)
	if n == 0 || n > MaxRanks || size < n || size&(size-1) != 0 {
		return nil, bad
	}
	offEnd := HeaderSize + 4*(int(n)+1)
	tabEnd := offEnd + 4*int(size)
	if len(data) < tabEnd {
		return nil, bad
	}
	e := &Encoding{
		name: name, match: match, n: n, mask: size - 1, longest: int(longest),
		offsets: data[HeaderSize:offEnd], table: data[offEnd:tabEnd], blob: data[tabEnd:],
	}
	if int(e.offset(n)) != len(e.blob) {
		return nil, bad
	}
	return e, nil
}

// Name returns the encoding's name.
func (e *Encoding) Name() string { return e.name }

func (e *Encoding) offset(r uint32) uint32 { return binary.LittleEndian.Uint32(e.offsets[4*r:]) }

// token returns the bytes of rank r.
func (e *Encoding) token(r uint32) []byte { return e.blob[e.offset(r):e.offset(r+1)] }

// Hash is the table's hash of a token: FNV-1a, then mixed so its high
// bits (the slot's tag) and low bits (the slot) are both good.
func Hash(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	h ^= h >> 31
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>29
}

// Slot is the table entry of rank r whose token hashes to h.
func Slot(r uint32, h uint64) uint32 { return (r + 1) | uint32(h>>50)<<rankBits }

// rank returns the rank of b, if b is a token.
func (e *Encoding) rank(b []byte) (uint32, bool) {
	if len(b) > e.longest || len(b) == 0 {
		return 0, false
	}
	h := Hash(b)
	tag := uint32(h >> 50)
	for i := uint32(h) & e.mask; ; i = (i + 1) & e.mask {
		v := binary.LittleEndian.Uint32(e.table[4*i:])
		if v == 0 {
			return 0, false
		}
		if v>>rankBits == tag {
			if r := v&rankMask - 1; string(e.token(r)) == string(b) {
				return r, true
			}
		}
	}
}

// Count returns how many tokens text encodes to, as tiktoken's
// encode_ordinary would (special tokens are plain text). It allocates
// nothing but for text that is not valid UTF-8.
func (e *Encoding) Count(text string) int {
	m := mergerPool.Get().(*merger)
	defer mergerPool.Put(m)
	m.keep = false
	m.count = 0
	e.encode(text, m)
	return m.count
}

// Encode returns the tokens of text.
func (e *Encoding) Encode(text string) []int {
	m := mergerPool.Get().(*merger)
	defer mergerPool.Put(m)
	m.keep = true
	m.out = m.out[:0]
	e.encode(text, m)
	out := make([]int, len(m.out))
	for i, r := range m.out {
		out[i] = int(r)
	}
	return out
}

// split calls piece with each piece of text, for tests.
func (e *Encoding) split(text string, piece func(string)) {
	for i := 0; i < len(text); {
		j := e.match(text, i)
		piece(text[i:j])
		i = j
	}
}

func (e *Encoding) encode(text string, m *merger) {
	if !utf8.ValidString(text) {
		// As tiktoken-go reads text: every invalid byte is U+FFFD.
		text = string([]rune(text))
	}
	for i := 0; i < len(text); {
		j := e.match(text, i)
		b := unsafe.Slice(unsafe.StringData(text[i:j]), j-i) // read only
		if r, ok := e.rank(b); ok {
			m.emit(r)
		} else {
			m.merge(e, b)
		}
		i = j
	}
}
