package tokens

import "testing"

func TestBPEOffline(t *testing.T) {
	tk := BPE{}
	// Counts from OpenAI's own tokenizers, loaded from the binary.
	for _, c := range []struct {
		model, text string
		want        int64
	}{
		{"gpt-4o", "Hello, world!", 4},
		{"openai/gpt-4o-mini", "Hello, world!", 4},
		{"gpt-4", "Hello, world!", 4},
		{"gpt-4o", "", 0},
		{"gpt-3.5-turbo", "tiktoken is great!", 6},
	} {
		if got := tk.Count(c.model, c.text); got != c.want {
			t.Errorf("Count(%q, %q) = %d, want %d", c.model, c.text, got, c.want)
		}
	}
	// Other families fall back to the conservative heuristic: never fewer
	// tokens than bytes/3.
	if got := tk.Count("claude-sonnet-4", "Hello, world!"); got != 5 {
		t.Errorf("fallback = %d, want 5", got)
	}
}

// Work before admission is linear: a megabyte without a space, once
// quadratic (minutes of one core), is counted, exactly, in a fraction of a
// second; measured by the benchmarks in package bpe, asserted here only by
// finishing at all within the test's own timeout.
func TestLongWordCounted(t *testing.T) {
	word := make([]byte, 1<<20)
	for i := range word {
		word[i] = 'a' + byte(i%7)
	}
	if n := (BPE{}).Count("gpt-4o", string(word)); n <= 0 || n > 1<<20 {
		t.Fatalf("%d tokens for a 1 MiB word", n)
	}
}
