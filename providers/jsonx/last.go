package jsonx

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// LastMember is Member read from the end of the object obj: its members
// from the last back to the one named key, so that a member an answer
// puts near its end (an OpenAI answer's usage, after its choices) is
// found without a scan of what comes before it. Of a valid object it
// returns what Member returns (FuzzLastMember); like the rest of the
// package, it does not judge validity, and of a body cut short it may
// take an object inside for the whole: read only bodies known whole with
// it.
func LastMember(obj []byte, key string) ([]byte, bool) {
	i := spaceBack(obj, len(obj)-1)
	if i < 0 || obj[i] != '}' {
		return nil, false
	}
	i = spaceBack(obj, i-1)
	for i >= 0 && obj[i] != '{' {
		vstart, ok := valueStartBack(obj, i)
		if !ok {
			return nil, false
		}
		j := spaceBack(obj, vstart-1)
		if j < 0 || obj[j] != ':' {
			return nil, false
		}
		j = spaceBack(obj, j-1)
		if j < 0 || obj[j] != '"' {
			return nil, false
		}
		kstart, ok := stringStartBack(obj, j)
		if !ok {
			return nil, false
		}
		if keyEquals(obj[kstart:j+1], key) {
			return obj[vstart : i+1], true
		}
		j = spaceBack(obj, kstart-1)
		switch {
		case j >= 0 && obj[j] == ',':
			i = spaceBack(obj, j-1)
		case j >= 0 && obj[j] == '{':
			i = j
		default:
			return nil, false
		}
	}
	return nil, false
}

// spaceBack returns the last index at or before i of a byte that is not
// whitespace, -1 when there is none.
func spaceBack(b []byte, i int) int {
	for i >= 0 && space(b[i]) {
		i--
	}
	return i
}

// valueStartBack returns where the value ending at b[i] begins.
func valueStartBack(b []byte, i int) (int, bool) {
	switch b[i] {
	case '"':
		return stringStartBack(b, i)
	case '}', ']':
		return containerStartBack(b, i)
	}
	j := i
	for j >= 0 && !space(b[j]) && b[j] != ':' && b[j] != ',' && b[j] != '[' && b[j] != '{' {
		j--
	}
	return j + 1, j < i
}

// stringStartBack returns where the string ending at b[i] == '"' begins:
// the quote before it that no backslash escapes (one after an even number
// of backslashes), as a string's own quotes are all escaped.
func stringStartBack(b []byte, i int) (int, bool) {
	for k := i - 1; k >= 0; {
		q := bytes.LastIndexByte(b[:k+1], '"')
		if q < 0 {
			return 0, false
		}
		n := 0
		for p := q - 1; p >= 0 && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q, true
		}
		k = q - 1
	}
	return 0, false
}

// containerStartBack returns where the object or array ending at b[i]
// begins: where its brackets balance, strings skipped, the bytes between
// looked at eight at a time.
func containerStartBack(b []byte, i int) (int, bool) {
	depth := 0
	for k := i; k >= 0; {
		if k >= 7 {
			m := brackets(binary.LittleEndian.Uint64(b[k-7:]))
			if m == 0 {
				k -= 8
				continue
			}
			k -= bits.LeadingZeros64(m) >> 3 // the last marked byte
		}
		switch b[k] {
		case '"':
			s, ok := stringStartBack(b, k)
			if !ok {
				return 0, false
			}
			k = s - 1
		case '}', ']':
			depth++
			k--
		case '{', '[':
			depth--
			if depth == 0 {
				return k, true
			}
			k--
		default:
			k--
		}
	}
	return 0, false
}
