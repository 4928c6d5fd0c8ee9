package bpe

import "sync"

// Merging: a piece starts as one part per byte. While some adjacent pair
// of parts is a token, the pair of lowest rank (the leftmost of equal
// ranks) becomes one part. That is tiktoken's byte_pair_merge, whose scan
// for the lowest pair makes it quadratic in the piece; here a piece longer
// than scanMax keeps its pairs in an indexed heap instead: n log n, and
// at most 20 bytes of work space per byte of the piece.

const (
	// scanMax is the longest piece merged by scanning: below it a scan
	// beats a heap.
	scanMax = 96
	// MaxExactPiece is the longest piece merged at all. A longer one (a
	// megabyte with no space, letter change or digit in it) is counted
	// one token per byte: every token holds at least one byte, so that is
	// never below the true count, and the work stays linear and bounded.
	MaxExactPiece = 1 << 20
)

const none = ^uint32(0)

// merger holds the work space of merging, reused across pieces.
type merger struct {
	// scan: part starts and the rank of each part with the next
	starts []uint32
	ranks  []uint32
	// heap: per byte position of a live part: the next part's start, the
	// previous part's start, the pair's rank, and its index in heap
	next, prev, at []uint32
	heap           []uint64 // rank<<32 | part start: the lowest, leftmost first
	// What merging yields: the ranks when keep is set, else their count.
	keep  bool
	out   []uint32
	count int
}

func (m *merger) emit(r uint32) {
	if m.keep {
		m.out = append(m.out, r)
		return
	}
	m.count++
}

var mergerPool = sync.Pool{New: func() any { return new(merger) }}

// merge emits the ranks of b's parts after merging.
func (m *merger) merge(e *Encoding, b []byte) {
	switch {
	case len(b) == 1:
		r, _ := e.rank(b) // every byte is a token
		m.emit(r)
	case len(b) <= scanMax:
		m.scan(e, b)
	case len(b) <= MaxExactPiece:
		m.heapMerge(e, b)
	default:
		for range b {
			m.emit(none)
		}
	}
}

// pairRank is the rank of b[from:to] if it is a token, else none.
func pairRank(e *Encoding, b []byte, from, to uint32) uint32 {
	if r, ok := e.rank(b[from:to]); ok {
		return r
	}
	return none
}

func (m *merger) scan(e *Encoding, b []byte) {
	n := uint32(len(b))
	m.starts = m.starts[:0]
	for i := range n + 1 {
		m.starts = append(m.starts, i)
	}
	m.ranks = m.ranks[:0]
	for i := range n + 1 {
		r := none
		if i+2 <= n {
			r = pairRank(e, b, i, i+2)
		}
		m.ranks = append(m.ranks, r)
	}
	starts, ranks := m.starts, m.ranks
	// ranks[i] is the rank of parts i and i+1 together; the last part
	// (the end of the piece) and the one before it have none.
	for len(starts) > 2 {
		best, at := none, -1
		for i := 0; i < len(starts)-2; i++ {
			if ranks[i] < best {
				best, at = ranks[i], i
			}
		}
		if at < 0 {
			break
		}
		i := at
		// Part i swallows part i+1: its pair is now with part i+2, and
		// part i−1's pair is with the grown part i.
		if i+3 < len(starts) {
			ranks[i] = pairRank(e, b, starts[i], starts[i+3])
		} else {
			ranks[i] = none
		}
		if i > 0 {
			ranks[i-1] = pairRank(e, b, starts[i-1], starts[i+2])
		}
		starts = append(starts[:i+1], starts[i+2:]...)
		ranks = append(ranks[:i+1], ranks[i+2:]...)
	}
	for i := 0; i+1 < len(starts); i++ {
		r, _ := e.rank(b[starts[i]:starts[i+1]])
		m.emit(r)
	}
}

// The heap is 4-ary (a node's children share a cache line) and sifts by
// moving a hole rather than swapping: fewer levels, half the writes.

func (m *merger) place(i uint32, key uint64) {
	m.heap[i] = key
	m.at[uint32(key)] = i
}

func (m *merger) up(i uint32) {
	key := m.heap[i]
	for i > 0 {
		p := (i - 1) / 4
		if key >= m.heap[p] {
			break
		}
		m.place(i, m.heap[p])
		i = p
	}
	m.place(i, key)
}

func (m *merger) down(i uint32) {
	n := uint32(len(m.heap))
	key := m.heap[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		best := c
		for k := c + 1; k < min(c+4, n); k++ {
			if m.heap[k] < m.heap[best] {
				best = k
			}
		}
		if m.heap[best] >= key {
			break
		}
		m.place(i, m.heap[best])
		i = best
	}
	m.place(i, key)
}

// remove takes part s's pair out of the heap.
func (m *merger) remove(s uint32) {
	i := m.at[s]
	if i == none {
		return
	}
	last := uint32(len(m.heap) - 1)
	moved := m.heap[last]
	m.heap = m.heap[:last]
	m.at[s] = none
	if i != last {
		m.place(i, moved)
		m.down(i)
		m.up(m.at[uint32(moved)])
	}
}

// setPair gives part s's pair a new rank, in or out of the heap.
func (m *merger) setPair(s, r uint32) {
	if r == none {
		m.remove(s)
		return
	}
	key := uint64(r)<<32 | uint64(s)
	i := m.at[s]
	if i == none {
		m.at[s] = uint32(len(m.heap))
		m.heap = append(m.heap, key)
		m.up(m.at[s])
		return
	}
	old := m.heap[i]
	m.heap[i] = key
	if key < old {
		m.up(i)
	} else {
		m.down(i)
	}
}

func grow(s []uint32, n int) []uint32 {
	if cap(s) < n {
		return make([]uint32, n)
	}
	return s[:n]
}

func (m *merger) heapMerge(e *Encoding, b []byte) {
	n := uint32(len(b))
	m.next = grow(m.next, int(n)+1)
	m.prev = grow(m.prev, int(n)+1)
	m.at = grow(m.at, int(n)+1)
	if cap(m.heap) < int(n) {
		m.heap = make([]uint64, 0, n)
	}
	m.heap = m.heap[:0]
	for i := range n + 1 {
		m.next[i], m.prev[i], m.at[i] = i+1, i-1, none
	}
	for i := uint32(0); i+2 <= n; i++ {
		if r := pairRank(e, b, i, i+2); r != none {
			m.at[i] = uint32(len(m.heap))
			m.heap = append(m.heap, uint64(r)<<32|uint64(i))
		}
	}
	for i := (len(m.heap) - 2) / 4; i >= 0; i-- {
		m.down(uint32(i))
	}
	for len(m.heap) > 0 {
		s := uint32(m.heap[0])
		t := m.next[s] // the part s swallows
		u := m.next[t]
		m.remove(t)
		m.next[s], m.prev[u] = u, s
		if u < n {
			m.setPair(s, pairRank(e, b, s, m.next[u]))
		} else {
			m.remove(s)
		}
		if s > 0 {
			p := m.prev[s]
			m.setPair(p, pairRank(e, b, p, u))
		}
	}
	for s := uint32(0); s < n; s = m.next[s] {
		r, _ := e.rank(b[s:m.next[s]])
		m.emit(r)
	}
	// Keep the work space of a large piece only if it is not huge.
	if n > 1<<16 {
		m.next, m.prev, m.at, m.heap = nil, nil, nil, nil
	}
}
