package tokens

import "testing"

func TestTiktokenOffline(t *testing.T) {
	tk := Tiktoken{}
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
