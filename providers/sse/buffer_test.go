package sse

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// trickle reads its stream n bytes at a time.
type trickle struct {
	r io.Reader
	n int
}

func (t trickle) Read(p []byte) (int, error) { return t.r.Read(p[:min(len(p), t.n)]) }

// A stream of keep-alive comments, however long, does not grow the
// reader's buffer: what lies before an event's start is let go of.
func TestCommentsDoNotGrowTheBuffer(t *testing.T) {
	stream := strings.Repeat(": ping\n\n", 100000) + "data: x\n\n"
	rd := NewReader(trickle{strings.NewReader(stream), 1000})
	defer rd.Close()
	ev, err := rd.Next()
	if err != nil || string(ev.Data) != "x" || string(ev.Raw) != "data: x\n\n" {
		t.Fatalf("%q, %v", ev.Raw, err)
	}
	if c := cap(rd.buf); c > 4<<10 {
		t.Fatalf("buffer grew to %d bytes", c)
	}
}

// An event longer than MaxEventBytes is an error, read in small pieces or
// whole, and the buffer stops growing there.
func TestEventTooLong(t *testing.T) {
	long := "data: " + strings.Repeat("x", MaxEventBytes+1) + "\n\n"
	for _, n := range []int{1 << 10, 1 << 20} {
		rd := NewReader(trickle{strings.NewReader(long), n})
		if _, err := rd.Next(); !errors.Is(err, ErrTooLong) {
			t.Fatalf("reads of %d: %v", n, err)
		}
		if c := cap(rd.buf); c > 2*MaxEventBytes+4<<10 {
			t.Fatalf("buffer grew to %d bytes", c)
		}
		rd.Close()
	}
}

// A long event arriving a little at a time is read whole, and a line's
// end is looked for only in the bytes that arrived after the last look.
func TestLongEventInPieces(t *testing.T) {
	line := strings.Repeat("y", 1<<20)
	rd := NewReader(trickle{strings.NewReader("data: " + line + "\ndata: z\n\ndata: after\n\n"), 512})
	defer rd.Close()
	ev, err := rd.Next()
	if err != nil || !bytes.Equal(ev.Data, []byte(line+"\nz")) {
		t.Fatalf("%d bytes of data, %v", len(ev.Data), err)
	}
	if ev, err = rd.Next(); err != nil || string(ev.Data) != "after" {
		t.Fatalf("%q, %v", ev.Data, err)
	}
}

type discard struct{ h http.Header }

func (d discard) Header() http.Header       { return d.h }
func (discard) WriteHeader(int)             {}
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) Flush()                      {}

// BenchmarkRelay reads a recorded chat stream (11 events, arrived in one
// read) and relays each event: what the gateway does with a stream
// besides looking at its chunks.
func BenchmarkRelay(b *testing.B) {
	stream, err := os.ReadFile("../../tests/fixtures/openai_chat_stream.sse")
	if err != nil {
		b.Fatal(err)
	}
	w := discard{http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		sw := NewWriter(w)
		rd := NewReader(bytes.NewReader(stream))
		rd.RelayTo(sw)
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			_ = sw.Relay(ev.Raw)
		}
		rd.Close()
	}
}
