package jsonx

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// Checked is what Check found of a JSON text.
type Checked struct {
	// Valid is json.Valid's answer.
	Valid bool
	// Duplicate, Name and Path are Duplicate's answer, for a valid text.
	Duplicate  bool
	Name, Path string
}

// Check reads the JSON text b once: whether it is valid (as json.Valid
// judges it: the grammar, strings without control characters and with
// known escapes, at most maxDepth levels of nesting), and, if it is,
// whether a member is given twice in one object, in the same pass; only
// then is the text read again, for Duplicate's name and path. Each byte is
// looked at once (strings eight at a time); a text without a duplicate
// allocates nothing but for escaped member names.
func Check(b []byte) Checked {
	c := checker{b: b}
	i := skipSpace(b, 0)
	end, ok := c.value(i)
	if !ok || skipSpace(b, end) != len(b) {
		return Checked{}
	}
	if !c.dup {
		return Checked{Valid: true}
	}
	// Rare (a client's mistake, or an attack): the path to the first
	// duplicate is found by the scan of every value, which finds the same
	// one (FuzzCheck holds the two alike).
	name, path, _ := looseDuplicate(b)
	return Checked{Valid: true, Duplicate: true, Name: name, Path: path}
}

// maxDepth is how deep encoding/json lets values nest.
const maxDepth = 10000

// checker is Check's state: the text, how deep the value it reads is, and
// whether a duplicate was found.
type checker struct {
	b     []byte
	depth int
	dup   bool
}

func (c *checker) value(i int) (int, bool) {
	b := c.b
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return c.str(i)
	case '{':
		return c.object(i)
	case '[':
		return c.array(i)
	case 't':
		return literal(b, i, "true")
	case 'f':
		return literal(b, i, "false")
	case 'n':
		return literal(b, i, "null")
	}
	return number(b, i)
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// number reads a number as JSON writes it: -?(0|[1-9][0-9]*)(.[0-9]+)?
// ([eE][+-]?[0-9]+)?.
func number(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// str reads the string at b[i] == '"', checking its escapes and that it
// holds no control character.
func (c *checker) str(i int) (int, bool) {
	b := c.b
	j := i + 1
	for j < len(b) {
		if j+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[j:])
			m := quoteOrEscape(w) | controls(w)
			if m == 0 {
				j += 8
				continue
			}
			j += bits.TrailingZeros64(m) >> 3
		}
		switch ch := b[j]; {
		case ch == '"':
			return j + 1, true
		case ch == '\\':
			if j+1 >= len(b) {
				return 0, false
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) || !hex4(b[j+2:j+6]) {
					return 0, false
				}
				j += 6
			default:
				return 0, false
			}
		case ch < 0x20:
			return 0, false
		default:
			j++
		}
	}
	return 0, false
}

// controls marks, as quoteOrEscape does, the bytes of w below 0x20 (its
// lowest mark is the first such byte).
func controls(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	return (w - ones*0x20) &^ w & highs
}

func hex4(h []byte) bool {
	for _, x := range h {
		if !('0' <= x && x <= '9' || 'a' <= x && x <= 'f' || 'A' <= x && x <= 'F') {
			return false
		}
	}
	return true
}

func (c *checker) object(i int) (int, bool) {
	b := c.b
	i, empty, ok := c.open(i, '}')
	if !ok || empty {
		return i, ok
	}
	var seen keySet
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		kstart := i
		kend, ok := c.str(i)
		if !ok {
			return 0, false
		}
		if !c.dup && seen.add(b[kstart:kend]) {
			c.dup = true
		}
		i = skipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		end, ok := c.value(skipSpace(b, i+1))
		if !ok {
			return 0, false
		}
		var more bool
		if i, more, ok = c.after(end, '}'); !ok || !more {
			return i, ok
		}
	}
}

func (c *checker) array(i int) (int, bool) {
	i, empty, ok := c.open(i, ']')
	if !ok || empty {
		return i, ok
	}
	for {
		end, ok := c.value(i)
		if !ok {
			return 0, false
		}
		var more bool
		if i, more, ok = c.after(end, ']'); !ok || !more {
			return i, ok
		}
	}
}

// open enters the object or array starting at b[i], closed by close: it
// returns where its first member or element starts, or, when it is empty,
// where it ends.
func (c *checker) open(i int, close byte) (j int, empty, ok bool) {
	if c.depth++; c.depth > maxDepth {
		return 0, false, false
	}
	j = skipSpace(c.b, i+1)
	if j < len(c.b) && c.b[j] == close {
		c.depth--
		return j + 1, true, true
	}
	return j, false, true
}

// after reads what follows a member or element that ends at end: a comma
// (more follow, from j) or close (the object or array ends before j).
func (c *checker) after(end int, close byte) (j int, more, ok bool) {
	i := skipSpace(c.b, end)
	switch {
	case i >= len(c.b):
		return 0, false, false
	case c.b[i] == ',':
		return skipSpace(c.b, i+1), true, true
	case c.b[i] == close:
		c.depth--
		return i + 1, false, true
	}
	return 0, false, false
}

// keySet is the member names of one object read so far, as a decoder
// unescapes them: a few compared in turn, past sixteen a set.
type keySet struct {
	buf  [16][]byte
	n    int
	more map[string]bool
}

// add adds the name the raw key k holds, and reports whether it was there.
func (s *keySet) add(k []byte) bool {
	key := k[1 : len(k)-1]
	if bytes.IndexByte(key, '\\') >= 0 {
		key = []byte(keyString(k))
	}
	if s.more != nil {
		if s.more[string(key)] {
			return true
		}
		s.more[string(key)] = true
		return false
	}
	for _, seen := range s.buf[:s.n] {
		if bytes.Equal(seen, key) {
			return true
		}
	}
	if s.n < len(s.buf) {
		s.buf[s.n] = key
		s.n++
		return false
	}
	s.more = make(map[string]bool, 2*len(s.buf)+1)
	for _, seen := range s.buf {
		s.more[string(seen)] = true
	}
	s.more[string(key)] = true
	return false
}
