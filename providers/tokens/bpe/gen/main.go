// Command gen writes the rank tables of tollgate's tokenizer from the
// published tiktoken rank files (as tiktoken-go-loader ships them), in the
// form package bpe uses in place: `go generate ./providers/tokens/bpe`.
//
// A table is, little endian: the header (magic "tgbpe\x00\x01\x00", the
// number of ranks n, the hash table's size, the longest token's length,
// 0), n+1 uint32 offsets of the tokens in the blob, the hash table (uint32
// slots: 0 empty, else the rank in the low 18 bits and 14 bits of the
// token's hash above), and the blob of every token's bytes in rank order.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/tollgate/tollgate/providers/tokens/bpe"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	for _, name := range []string{"o200k_base", "cl100k_base"} {
		ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(name + ".tiktoken")
		if err != nil {
			fail(err)
		}
		data, err := build(ranks)
		if err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
		}
		if err := os.WriteFile(filepath.Join(dir, name+".bpe"), data, 0o644); err != nil {
			fail(err)
		}
		fmt.Printf("%s: %d ranks, %d bytes\n", name, len(ranks), len(data))
	}
}

func build(ranks map[string]int) ([]byte, error) {
	n := len(ranks)
	tokens := make([]string, n)
	for tok, r := range ranks {
		if r < 0 || r >= n || tokens[r] != "" {
			return nil, fmt.Errorf("ranks are not 0..%d, each once (rank %d)", n-1, r)
		}
		tokens[r] = tok
	}
	if n > bpe.MaxRanks {
		return nil, fmt.Errorf("%d ranks, more than %d", n, bpe.MaxRanks)
	}
	size := 1
	for size < 2*n {
		size <<= 1
	}
	table := make([]uint32, size)
	var blob []byte
	offsets := make([]uint32, n+1)
	longest := 0
	for r, tok := range tokens {
		offsets[r] = uint32(len(blob))
		blob = append(blob, tok...)
		longest = max(longest, len(tok))
		h := bpe.Hash([]byte(tok))
		slot := bpe.Slot(uint32(r), h)
		for i := h & uint64(size-1); ; i = (i + 1) & uint64(size-1) {
			if table[i] == 0 {
				table[i] = slot
				break
			}
		}
	}
	offsets[n] = uint32(len(blob))
	out := make([]byte, 0, bpe.HeaderSize+4*(n+1)+4*size+len(blob))
	out = append(out, bpe.Magic...)
	for _, v := range []uint32{uint32(n), uint32(size), uint32(longest), 0} {
		out = binary.LittleEndian.AppendUint32(out, v)
	}
	for _, v := range offsets {
		out = binary.LittleEndian.AppendUint32(out, v)
	}
	for _, v := range table {
		out = binary.LittleEndian.AppendUint32(out, v)
	}
	return append(out, blob...), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen:", err)
	os.Exit(1)
}
