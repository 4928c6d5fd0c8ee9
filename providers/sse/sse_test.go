package sse_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/providers/sse"
)

// flushRecorder is a ResponseWriter that records what each flush sent.
type flushRecorder struct {
	mu      sync.Mutex
	h       http.Header
	buf     strings.Builder
	flushes []string
	flushed chan struct{}
}

func newFlushRecorder() *flushRecorder {
	return &flushRecorder{h: http.Header{}, flushed: make(chan struct{}, 100)}
}

func (f *flushRecorder) Header() http.Header { return f.h }
func (f *flushRecorder) WriteHeader(int)     {}
func (f *flushRecorder) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.Write(p)
}
func (f *flushRecorder) Flush() {
	f.mu.Lock()
	if f.buf.Len() > 0 {
		f.flushes = append(f.flushes, f.buf.String())
		f.buf.Reset()
	}
	f.mu.Unlock()
	f.flushed <- struct{}{}
}

func (f *flushRecorder) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.flushes...)
}

// relay is the providers' loop: read, relay, until the stream ends.
func relay(rd *sse.Reader, sw *sse.Writer) (events int) {
	for {
		ev, err := rd.Next()
		if err != nil {
			return events
		}
		if sw.Relay(ev.Raw) != nil {
			return events
		}
		events++
	}
}

// Events that arrive together leave in one flush; an event is flushed
// before the relay waits for the next, and the last before the end.
func TestRelayFlushesBeforeWaiting(t *testing.T) {
	up, upw := io.Pipe()
	rec := newFlushRecorder()
	sw := sse.NewWriter(rec)
	rd := sse.NewReader(up)
	rd.RelayTo(sw)
	defer rd.Close()
	done := make(chan int)
	go func() { done <- relay(rd, sw) }()

	burst := "data: 1\n\ndata: 2\n\n: a comment\n\ndata: 3\n\n"
	if _, err := io.WriteString(upw, burst); err != nil {
		t.Fatal(err)
	}
	// The relay now waits on the upstream: the burst must be out already.
	waitFor(t, rec, "data: 1\n\ndata: 2\n\ndata: 3\n\n")
	if _, err := io.WriteString(upw, "event: x\ndata: 4\n\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, rec, "event: x\ndata: 4\n\n")
	_, _ = io.WriteString(upw, "data: 5\n\n")
	upw.Close()
	if n := <-done; n != 5 {
		t.Fatalf("relayed %d events, want 5", n)
	}
	got := rec.sent()
	want := []string{"data: 1\n\ndata: 2\n\ndata: 3\n\n", "event: x\ndata: 4\n\n", "data: 5\n\n"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("flushes %q, want %q", got, want)
	}
}

// waitFor waits (bounded) until the last flush sent want.
func waitFor(t *testing.T, rec *flushRecorder, want string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if s := rec.sent(); len(s) > 0 && s[len(s)-1] == want {
			return
		}
		select {
		case <-rec.flushed:
		case <-deadline:
			t.Fatalf("not flushed while the relay waits: %q (flushes %q)", want, rec.sent())
		}
	}
}

// A client gone is seen at the next relayed event, after the flush that
// found it gone.
type failingFlush struct{ *flushRecorder }

func (f *failingFlush) Flush() {}

func (f *failingFlush) FlushError() error { return errors.New("client gone") }

func TestRelayReportsAFailedFlush(t *testing.T) {
	rec := &failingFlush{flushRecorder: newFlushRecorder()}
	sw := sse.NewWriter(rec)
	rd := sse.NewReader(strings.NewReader("data: 1\n\n"))
	rd.RelayTo(sw)
	defer rd.Close()
	ev, err := rd.Next()
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Relay(ev.Raw); err != nil {
		t.Fatalf("first relay: %v", err)
	}
	if _, err := rd.Next(); err != io.EOF { // flushes, and the flush fails
		t.Fatalf("end: %v", err)
	}
	if err := sw.Relay([]byte("data: 2\n\n")); err == nil {
		t.Fatal("a relay after a failed flush succeeded")
	}
}
