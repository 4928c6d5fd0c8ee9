package tokens

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/providers/tokens/bpe"
)

// texts returns n texts of a few words each, some of them alike.
func texts(n int, r *rand.Rand) []string {
	words := []string{"You", " are", " terse", ".", " Say", " hello", " in", " five", " words", "\n", "日本語", " 🙂", "  ", "x"}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for range 1 + r.IntN(12) {
			b.WriteString(words[r.IntN(len(words))])
		}
		out[i] = b.String()
	}
	return out
}

// A text counted again is found, with the count the encoding gives it,
// for both encodings; and what was found is what counting again gives.
func TestCountedTextsCountAsTheEncodingCounts(t *testing.T) {
	o200k, _ := bpe.O200K()
	cl100k, _ := bpe.CL100K()
	r := rand.New(rand.NewPCG(1, 2))
	for _, text := range texts(2000, r) {
		for _, c := range []struct {
			model string
			enc   *bpe.Encoding
		}{{"gpt-4o", o200k}, {"gpt-4", cl100k}} {
			want := int64(c.enc.Count(text))
			for range 2 { // counted, then found
				if got := (BPE{}).Count(c.model, text); got != want {
					t.Fatalf("Count(%q, %q) = %d, want %d", c.model, text, got, want)
				}
			}
		}
	}
}

// Two texts whose hashes pick one slot take it in turn: each is found
// only while the slot holds its own count, never the other's.
func TestCountedSlotHoldsTheLastText(t *testing.T) {
	c := newCounted()
	first := "the first text"
	s, _ := c.slot(first)
	var second string
	for i := 0; ; i++ {
		second = fmt.Sprintf("another text %d", i)
		if t2, _ := c.slot(second); t2 == s {
			break
		}
	}
	c.put(first, 7)
	if n, ok := c.get(first); !ok || n != 7 {
		t.Fatalf("first = %d, %v; want 7", n, ok)
	}
	if _, ok := c.get(second); ok {
		t.Fatal("second found in the slot of first")
	}
	c.put(second, 9)
	if _, ok := c.get(first); ok {
		t.Fatal("first found after second took its slot")
	}
	if n, ok := c.get(second); !ok || n != 9 {
		t.Fatalf("second = %d, %v; want 9", n, ok)
	}
}

// An empty slot is no text's, a count past what a slot holds is not
// remembered, and neither is a negative one.
func TestCountedEdges(t *testing.T) {
	c := newCounted()
	for i := range 10000 {
		if _, ok := c.get(fmt.Sprint(i)); ok {
			t.Fatalf("text %d found in an empty cache", i)
		}
	}
	c.put("big", maxCount+1)
	c.put("negative", -1)
	for _, text := range []string{"big", "negative"} {
		if n, ok := c.get(text); ok {
			t.Fatalf("%s remembered as %d", text, n)
		}
	}
	c.put("largest", maxCount)
	if n, ok := c.get("largest"); !ok || n != maxCount {
		t.Fatalf("largest = %d, %v", n, ok)
	}
}

// Goroutines counting the same texts at once, their slots overwritten
// under them, each get the encoding's count every time.
func TestCountedAtOnce(t *testing.T) {
	enc, _ := bpe.O200K()
	all := texts(5000, rand.New(rand.NewPCG(3, 4)))
	want := make(map[string]int64, len(all))
	for _, s := range all {
		want[s] = int64(enc.Count(s))
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 5))
			for range 20000 {
				s := all[r.IntN(len(all))]
				if got := (BPE{}).Count("gpt-4o", s); got != want[s] {
					errs <- fmt.Sprintf("%q: %d, want %d", s, got, want[s])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// BenchmarkCountAgain counts a system prompt and a turn of a conversation
// a request sends again: found by their hash, beside counted anew.
func BenchmarkCountAgain(b *testing.B) {
	prompt := strings.Repeat("You are a careful assistant for a billing team; answer in two sentences. ", 40)
	enc, _ := bpe.O200K()
	b.Run("counted", func(b *testing.B) {
		b.SetBytes(int64(len(prompt)))
		for b.Loop() {
			(BPE{}).Count("gpt-4o", prompt)
		}
	})
	b.Run("anew", func(b *testing.B) {
		b.SetBytes(int64(len(prompt)))
		for b.Loop() {
			enc.Count(prompt)
		}
	})
}
