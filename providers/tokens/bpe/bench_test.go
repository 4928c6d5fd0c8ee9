package bpe

import (
	"strings"
	"testing"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// English prose, about 1 MiB.
var prose = strings.Repeat("The quick brown fox jumps over the lazy dog; it's 42 degrees, isn't it? "+
	"Tokenizers split text into pieces, then merge each piece's bytes by rank.\n", 1<<20/146)

// One unbroken word of 1 MiB.
var word = strings.Repeat("abcdefghij", 1<<20/10)

func benchCount(b *testing.B, text string, enc func() (*Encoding, error)) {
	e, err := enc()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = e.Count(text)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*float64(1<<20)/float64(len(text)), "ns/MiB")
}

func BenchmarkCountProseO200K(b *testing.B)  { benchCount(b, prose, O200K) }
func BenchmarkCountProseCL100K(b *testing.B) { benchCount(b, prose, CL100K) }
func BenchmarkCountWordO200K(b *testing.B)   { benchCount(b, word, O200K) }
func BenchmarkCountWordCL100K(b *testing.B)  { benchCount(b, word, CL100K) }

// Loading a table is reading its header: there is nothing to parse.
func BenchmarkLoad(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := load("o200k_base", o200kData, matchO200K); err != nil {
			b.Fatal(err)
		}
	}
}

// tiktoken-go beside it, in the same run: prose at 1 MiB; the unbroken
// word at 64 KiB only (it is quadratic: 1 MiB takes minutes).
func benchOracle(b *testing.B, name, text string) {
	enc := oracle(b, name)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = len(enc.EncodeOrdinary(text))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*float64(1<<20)/float64(len(text)), "ns/MiB")
}

func BenchmarkTiktokenGoProseO200K(b *testing.B) { benchOracle(b, "o200k_base", prose) }
func BenchmarkTiktokenGoWord64KO200K(b *testing.B) {
	benchOracle(b, "o200k_base", word[:64<<10])
}
func BenchmarkCountWord64KO200K(b *testing.B) { benchCount(b, word[:64<<10], O200K) }

// Loading tiktoken-go's tables, for comparison with BenchmarkLoad.
func BenchmarkTiktokenGoLoad(b *testing.B) {
	for b.Loop() {
		if _, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe("o200k_base.tiktoken"); err != nil {
			b.Fatal(err)
		}
	}
}
