package bpe

import (
	"unicode"
	"unicode/utf8"
)

// The pieces of a text are the successive matches of the encoding's
// pattern, as tiktoken-go finds them with regexp2 (.NET semantics: the
// first alternative that matches at a position wins; quantifiers are
// greedy and give back what the rest needs). Every character starts some
// alternative, so pieces are contiguous and each match starts where the
// last ended. The scanners below are those patterns written out by hand,
// one function per alternative, in the patterns' order:
//
// cl100k_base:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// o200k_base:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Each scanner looks at every character a bounded number of times, so a
// text is split in linear time.

// Character classes.
const (
	cL  = 1 << iota // \p{L}
	cN              // \p{N}
	cS              // \s (unicode.IsSpace, as regexp2)
	cU              // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	cW              // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	cNL             // \r or \n
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		t[c] = classOf(rune(c))
	}
	return t
}()

func classOf(r rune) uint8 {
	var c uint8
	switch {
	case unicode.IsLetter(r):
		c = cL
		switch {
		case unicode.IsUpper(r), unicode.IsTitle(r):
			c |= cU
		case unicode.IsLower(r):
			c |= cW
		default: // Lm, Lo
			c |= cU | cW
		}
	case unicode.IsMark(r):
		c = cU | cW
	case unicode.IsNumber(r):
		c = cN
	case unicode.IsSpace(r):
		c = cS
		if r == '\r' || r == '\n' {
			c |= cNL
		}
	}
	return c
}

// at decodes the character at t[i]: its class and size.
func at(t string, i int) (uint8, int) {
	if c := t[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(t[i:])
	return classOf(r), n
}

// run returns the end of the run of characters from i whose class has any
// of the bits in want.
func run(t string, i int, want uint8) int {
	for i < len(t) {
		c, n := at(t, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// notIn returns the end of the run from i of characters whose class has
// none of the bits in not.
func notIn(t string, i int, not uint8) int {
	for i < len(t) {
		c, n := at(t, i)
		if c&not != 0 {
			break
		}
		i += n
	}
	return i
}

// contraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or -1.
// Case is ignored as regexp2 ignores it: the text's character lowered.
func contraction(t string, i int) int {
	if i >= len(t) || t[i] != '\'' {
		return -1
	}
	i++
	lower := func(j int) (rune, int) {
		if j >= len(t) {
			return 0, 0
		}
		r, n := utf8.DecodeRuneInString(t[j:])
		return unicode.ToLower(r), n
	}
	r1, n1 := lower(i)
	var second rune
	switch r1 {
	case 's', 't', 'm', 'd':
		return i + n1
	case 'r', 'v':
		second = 'e'
	case 'l':
		second = 'l'
	default:
		return -1
	}
	if r2, n2 := lower(i + n1); n2 > 0 && r2 == second {
		return i + n1 + n2
	}
	return -1
}

// digits returns the end of \p{N}{1,3} at i (the first is a digit).
func digits(t string, i int) int {
	for k := 0; k < 3 && i < len(t); k++ {
		c, n := at(t, i)
		if c&cN == 0 {
			break
		}
		i += n
	}
	return i
}

// bytesIn returns the end of the run from i of the ASCII bytes in set.
func bytesIn(t string, i int, set string) int {
	for i < len(t) {
		found := false
		for j := 0; j < len(set); j++ {
			if t[i] == set[j] {
				found = true
				break
			}
		}
		if !found {
			break
		}
		i++
	}
	return i
}

// space matches the last three alternatives of both patterns at i, a
// whitespace character: \s*[\r\n]+ (up to the run's last newline),
// \s+(?!\S) (the run, less its last character when something follows),
// \s+.
func space(t string, i int) int {
	end, last, lastNL := i, i, -1
	for end < len(t) {
		c, n := at(t, end)
		if c&cS == 0 {
			break
		}
		if c&cNL != 0 {
			lastNL = end
		}
		last = end
		end += n
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case end == len(t) || last == i:
		return end
	}
	return last
}

func matchCL100K(t string, i int) int {
	c0, n0 := at(t, i)
	if j := contraction(t, i); j > 0 {
		return j
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0&cL != 0 {
		return run(t, i, cL)
	}
	if c0&(cL|cN|cNL) == 0 && i+n0 < len(t) {
		if c1, _ := at(t, i+n0); c1&cL != 0 {
			return run(t, i+n0, cL)
		}
	}
	if c0&cN != 0 {
		return digits(t, i)
	}
	// ?[^\s\p{L}\p{N}]+[\r\n]*
	if j := punctuation(t, i, c0, n0); j > 0 {
		return bytesIn(t, j, "\r\n")
	}
	return space(t, i)
}

// punctuation returns the end of ` ?[^\s\p{L}\p{N}]+` at i, or -1.
func punctuation(t string, i int, c0 uint8, n0 int) int {
	if t[i] == ' ' && i+1 < len(t) {
		if c1, _ := at(t, i+1); c1&(cS|cL|cN) == 0 {
			return notIn(t, i+1, cS|cL|cN)
		}
	}
	if c0&(cS|cL|cN) == 0 {
		return notIn(t, i, cS|cL|cN)
	}
	return -1
}

func matchO200K(t string, i int) int {
	c0, n0 := at(t, i)
	prefix := c0&(cL|cN|cNL) == 0 && i+n0 < len(t) // [^\r\n\p{L}\p{N}]?
	if prefix {
		if j := upperLower(t, i+n0); j > 0 {
			return j
		}
	}
	if j := upperLower(t, i); j > 0 {
		return j
	}
	if prefix {
		if j := upperThenLower(t, i+n0); j > 0 {
			return j
		}
	}
	if j := upperThenLower(t, i); j > 0 {
		return j
	}
	if c0&cN != 0 {
		return digits(t, i)
	}
	// ?[^\s\p{L}\p{N}]+[\r\n/]*
	if j := punctuation(t, i, c0, n0); j > 0 {
		return bytesIn(t, j, "\r\n/")
	}
	return space(t, i)
}

// withContraction extends a word ending at j by a contraction after it.
func withContraction(t string, j int) int {
	if k := contraction(t, j); k > 0 {
		return k
	}
	return j
}

// upperLower matches U*W+ and the optional contraction at s, or -1. U* is
// greedy: when no W follows the U run, it gives back up to its last
// character that is W too (Lm, Lo, M), which W+ then takes alone.
func upperLower(t string, s int) int {
	lastW, lastN := -1, 0
	u := s
	for u < len(t) {
		c, n := at(t, u)
		if c&cU == 0 {
			break
		}
		if c&cW != 0 {
			lastW, lastN = u, n
		}
		u += n
	}
	if u < len(t) {
		if c, _ := at(t, u); c&cW != 0 {
			return withContraction(t, run(t, u, cW))
		}
	}
	if lastW < 0 {
		return -1
	}
	return withContraction(t, lastW+lastN)
}

// upperThenLower matches U+W* and the optional contraction at s, or -1.
func upperThenLower(t string, s int) int {
	if s >= len(t) {
		return -1
	}
	if c, _ := at(t, s); c&cU == 0 {
		return -1
	}
	return withContraction(t, run(t, run(t, s, cU), cW))
}
