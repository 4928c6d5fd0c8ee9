package tokens

import (
	"hash/maphash"
	"sync/atomic"
)

// counted remembers what texts an encoding counted lately, found by a
// keyed hash of their bytes: a request re-sends its system prompt and,
// turn after turn, the whole conversation before its last message, and
// hashing a text costs a small fraction of encoding it (the rank tables'
// lookups miss the processor's caches; the hash streams the text once).
//
// It is a fixed array of slots, one word each, so what a client sends
// can fill it but never grow it: a slot holds the high bits of the text's
// hash (its tag) and the count, stored and loaded as one atomic word, so
// a reader sees a slot whole or not at all. A text is found only where
// its slot's tag is its own: two texts alike in all 53 bits the slot and
// the tag take of a hash keyed per process, which a client cannot aim
// at, would share a count (a reservation, which the settlement corrects
// to what the upstream reports either way).
type counted struct {
	seed  maphash.Seed
	slots [countedSlots]atomic.Uint64
}

const (
	countedSlots = 1 << 12 // 32 KiB an encoding
	// countBits of a slot hold the count; the rest, the tag. A text of
	// more tokens than that is not remembered.
	countBits = 22
	maxCount  = 1<<countBits - 1
)

func newCounted() *counted { return &counted{seed: maphash.MakeSeed()} }

// slot returns the slot of text's hash and the tag it holds there.
func (c *counted) slot(text string) (*atomic.Uint64, uint64) {
	h := maphash.String(c.seed, text)
	// The hash's high bits above the count's, the highest set: a tag is
	// never 0, which an empty slot holds.
	tag := (h | 1<<63) >> countBits << countBits
	return &c.slots[h&(countedSlots-1)], tag
}

// get returns the count remembered for text.
func (c *counted) get(text string) (int64, bool) {
	s, tag := c.slot(text)
	v := s.Load()
	if v&^maxCount != tag {
		return 0, false
	}
	return int64(v & maxCount), true
}

// put remembers text's count n, in place of what its slot held.
func (c *counted) put(text string, n int64) {
	if n < 0 || n > maxCount {
		return
	}
	s, tag := c.slot(text)
	s.Store(tag | uint64(n))
}
