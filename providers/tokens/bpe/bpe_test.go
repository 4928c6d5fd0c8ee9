package bpe

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// tiktoken-go is the oracle: what OpenAI's tokenizers count, as the Go
// port everyone uses counts it.
func oracle(t testing.TB, name string) *tiktoken.Tiktoken {
	t.Helper()
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding(name)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

func encodings(t testing.TB) []*Encoding {
	t.Helper()
	a, err := O200K()
	if err != nil {
		t.Fatal(err)
	}
	b, err := CL100K()
	if err != nil {
		t.Fatal(err)
	}
	return []*Encoding{a, b}
}

// corpus is text of every kind the tokenizers split differently.
func corpus() []string {
	c := []string{
		"", "a", " ", "  ", "\n", "\r\n", " \n ", "\n\n\n", "\t\t x", "   hello", "hello   ", "hello  \n  world",
		"Hello, world! How's it going? I'm fine; you're great, we've done it, they'll see, he'd know.",
		"DON'T SHOUT, Don'T, don't 'S 'RE 'll 'LL 'Ve",
		"The quick brown fox jumps over the lazy dog. 1234567890 3.14159 1,000,000 2026-12-01T07:00:00Z",
		"func main() {\n\tfmt.Println(\"hi\") // comment\n\tx := []int{1, 2, 3}\n\treturn x[0] + y/2\n}\n",
		"SELECT * FROM users WHERE id = 42 AND name LIKE '%o%';",
		"{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":16}",
		"https://example.com/a/b/c?x=1&y=%20z#frag //path///more\n/",
		"emoji: 😀😃😄😁 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️",
		"中文的文本在这里。日本語のテキストとカタカナ。한국어 텍스트입니다.",
		"Ελληνικά κείμενα, русский текст, עברית, العربية النص, हिन्दी पाठ",
		"Mixed: abcДЕФghi123αβγ!!!?? ¿Qué? ¡Sí! naïve café résumé Ångström",
		"Combining: e\u0301 a\u0308\u0304 \u0301alone x\u20dd !\u0301 ",
		"Titlecase ǅ ǈ ǋ and modifiers ʰʲ ˀ and others ā̃",
		"Numbers: ١٢٣ ٤٥٦ ⅧⅨ ½ ¾ ²³ 𝟘𝟙𝟚",
		"Spaces: a\u00a0b\u2003c\u3000d\u2028e\u0085f\u000bg\u000ch",
		"Tabs\t\tand\r\rcarriage\r\nreturns\n\r\n",
		strings.Repeat("a", 5000), strings.Repeat("ab", 3000), strings.Repeat("xyz123", 500),
		strings.Repeat(" ", 3000), strings.Repeat("\n", 300), strings.Repeat(" \n", 200), strings.Repeat("!", 1000),
		strings.Repeat("é", 2000), strings.Repeat("中", 1000), strings.Repeat("😀", 500),
		"aGVsbG8gd29ybGQgdGhpcyBpcyBiYXNlNjQgZW5jb2RlZCB0ZXh0IHdpdGhvdXQgc3BhY2VzLCBsb25n" + strings.Repeat("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=", 40),
		"<|endoftext|> special tokens are text <|fim_prefix|>",
		"invalid \xff\xfe utf8 \xc3\x28 and \xe2\x82 end\x80",
		"'s", "'", "''", "'x", " 's", "a's", "A'S", "ĳ'ſ", "K'ſ",
	}
	// Random text over a mix of scripts and classes.
	rng := rand.New(rand.NewPCG(1, 2))
	pools := []string{"abcXYZ", " \t\n\r", "0123456789", ".,;:!?/\\'\"()[]{}<>-_=+*&^%$#@~`|", "éüßçñÅØ", "中文字日本", "😀👍🏽",
		"\u0301\u0308\u20dd", "ǅʰ", "١٢٣Ⅷ½", "\u00a0\u2003\u3000\u0085"}
	for range 300 {
		var b strings.Builder
		for range rng.IntN(200) {
			p := []rune(pools[rng.IntN(len(pools))])
			for range 1 + rng.IntN(6) {
				b.WriteRune(p[rng.IntN(len(p))])
			}
		}
		c = append(c, b.String())
	}
	return c
}

func TestSameTokensAsTiktoken(t *testing.T) {
	for _, e := range encodings(t) {
		ref := oracle(t, e.Name())
		for i, text := range corpus() {
			want := ref.EncodeOrdinary(text)
			got := e.Encode(text)
			if !slices.Equal(got, want) {
				t.Errorf("%s, text %d %q:\n got %v\nwant %v", e.Name(), i, short(text), head(got), head(want))
			}
			if n := e.Count(text); n != len(want) {
				t.Errorf("%s, text %d: Count %d, want %d", e.Name(), i, n, len(want))
			}
		}
	}
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func head(v []int) []int {
	if len(v) > 40 {
		return v[:40]
	}
	return v
}

// Every piece boundary the splitter finds is one regexp2 finds.
func TestSplitMatchesPattern(t *testing.T) {
	for _, e := range encodings(t) {
		ref := oracle(t, e.Name())
		for _, text := range corpus() {
			if !utf8.ValidString(text) {
				continue
			}
			var pieces []string
			e.split(text, func(p string) { pieces = append(pieces, p) })
			if strings.Join(pieces, "") != text {
				t.Fatalf("%s: pieces do not cover %q", e.Name(), short(text))
			}
			// One piece at a time must encode as tiktoken encodes it alone.
			for _, p := range pieces {
				if got, want := e.Encode(p), ref.EncodeOrdinary(p); !slices.Equal(got, want) {
					t.Errorf("%s: piece %q: %v, want %v", e.Name(), short(p), head(got), head(want))
				}
			}
		}
	}
}

// The contraction's case is ignored as regexp2 ignores it: a character is
// lowered and compared. Whatever lowers to one of the contraction's
// letters is found here.
func TestContractionCaseFolding(t *testing.T) {
	var odd []rune
	for r := rune(128); r <= unicode.MaxRune; r++ {
		if strings.ContainsRune("strevmld", unicode.ToLower(r)) {
			odd = append(odd, r)
		}
	}
	for _, e := range encodings(t) {
		ref := oracle(t, e.Name())
		for _, r := range odd {
			text := "x'" + string(r) + "e y"
			if got, want := e.Encode(text), ref.EncodeOrdinary(text); !slices.Equal(got, want) {
				t.Errorf("%s: %q: %v, want %v", e.Name(), text, got, want)
			}
		}
	}
}

func FuzzSameTokensAsTiktoken(f *testing.F) {
	for _, c := range corpus()[:40] {
		f.Add(c)
	}
	encs := encodings(f)
	refs := []*tiktoken.Tiktoken{oracle(f, encs[0].Name()), oracle(f, encs[1].Name())}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 1024 {
			return // the oracle is quadratic
		}
		for i, e := range encs {
			if got, want := e.Encode(text), refs[i].EncodeOrdinary(text); !slices.Equal(got, want) {
				t.Fatalf("%s: %q: %v, want %v", e.Name(), text, got, want)
			}
		}
	})
}
