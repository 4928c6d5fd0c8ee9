// Package tokens estimates how many tokens a prompt holds, before it is
// sent, for the token reservation made at admission.
package tokens

// Estimator counts the tokens of texts for a model.
type Estimator interface {
	// Count returns the tokens of text for model.
	Count(model, text string) int64
}

// Heuristic is the conservative fallback for models with no offline
// tokenizer: one token per three bytes, rounded up. Real tokenizers
// average about four bytes per token on English and fewer on code and
// other scripts; three keeps the estimate on the high side, so a
// reservation rarely needs charging up later.
type Heuristic struct{}

// Count implements Estimator.
func (Heuristic) Count(_, text string) int64 {
	return int64((len(text) + 2) / 3)
}
