package sse_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/providers/sse"
)

// referenceNext is the reader sse.Reader was before it read events in
// place (line by line through a bufio.Reader, each event copied): what
// FuzzReaderAsReference holds it to.
func referenceNext(r *bufio.Reader) (sse.Event, error) {
	var raw, data bytes.Buffer
	var ev sse.Event
	hasData := false
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		raw.Write(line)
		if err != nil {
			if errors.Is(err, io.EOF) {
				if raw.Len() == 0 || len(bytes.TrimSpace(raw.Bytes())) == 0 {
					return sse.Event{}, io.EOF
				}
				if hasData || ev.Name != "" {
					ev.Data = data.Bytes()
					ev.Raw = append(raw.Bytes(), '\n')
					return ev, nil
				}
				return sse.Event{}, io.ErrUnexpectedEOF
			}
			return sse.Event{}, err
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		if len(trimmed) == 0 {
			if !hasData && ev.Name == "" {
				raw.Reset()
				continue
			}
			ev.Data = data.Bytes()
			ev.Raw = raw.Bytes()
			return ev, nil
		}
		if trimmed[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(trimmed, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.Name = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		}
	}
}

// chunked reads its stream in reads of the sizes given, in turn (0 is a
// read of nothing), then whatever is left.
type chunked struct {
	b     []byte
	sizes []byte
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := len(c.b)
	if len(c.sizes) > 0 {
		n = min(n, int(c.sizes[0]))
		c.sizes = c.sizes[1:]
	}
	n = copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

type read struct {
	name, data, raw string
	err             error
}

func readAll(next func() (sse.Event, error)) []read {
	var out []read
	for range 10000 {
		ev, err := next()
		out = append(out, read{ev.Name, string(ev.Data), string(ev.Raw), err})
		if err != nil {
			return out
		}
	}
	return out
}

// The reader gives the events, fields, raw bytes and errors the
// reference gives, however the stream is cut into reads.
func FuzzReaderAsReference(f *testing.F) {
	for _, s := range []string{
		"data: 1\n\ndata: 2\n\n: a comment\n\ndata: 3\n\n",
		"event: x\ndata: a\ndata: b\n\n",
		"data: x\r\n\r\ndata: y\r\n\r\n",
		"\n\n\ndata: x\n\n\n\n",
		"event: a\ndata: x",
		"data: x\n",
		"data: x\n\r",
		": keepalive\n",
		"data:\n\ndata\n\nevent:\n\nid: 1\nretry: 3\ndata: z\n\n",
		"data: " + strings.Repeat("long ", 2000) + "\n\nevent: e\n\n",
		"event: a\ndata: 1\n\nevent: a\ndata: 2\n\n",
	} {
		f.Add([]byte(s), []byte{1, 3, 0, 7, 64})
		f.Add([]byte(s), []byte{})
	}
	f.Fuzz(func(t *testing.T, stream, sizes []byte) {
		ref := bufio.NewReaderSize(bytes.NewReader(stream), 16)
		want := readAll(func() (sse.Event, error) { return referenceNext(ref) })
		rd := sse.NewReader(&chunked{b: stream, sizes: sizes})
		defer rd.Close()
		got := readAll(rd.Next)
		if len(got) != len(want) {
			t.Fatalf("%d reads, want %d:\n got %+v\nwant %+v", len(got), len(want), got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("read %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	})
}

// What Relay holds of events lying side by side leaves in one write, in
// the order relayed, with an event not relayed and bytes not the reader's
// between: the client sees exactly the bytes relayed.
func TestRelayWritesWhatWasRelayed(t *testing.T) {
	stream := "data: 1\n\ndata: 2\n\ndata: drop\n\ndata: 3\n\n\n\ndata: 4\n\ndata: 5\n\n"
	rec := newFlushRecorder()
	sw := sse.NewWriter(rec)
	rd := sse.NewReader(&chunked{b: []byte(stream), sizes: []byte{9, 200}})
	rd.RelayTo(sw)
	var want strings.Builder
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		switch string(ev.Data) {
		case "drop":
			continue
		case "4":
			extra := []byte("data: not the reader's\n\n")
			want.Write(extra)
			if err := sw.Relay(extra); err != nil {
				t.Fatal(err)
			}
		}
		want.Write(ev.Raw)
		if err := sw.Relay(ev.Raw); err != nil {
			t.Fatal(err)
		}
	}
	rd.Close()
	if got := strings.Join(rec.sent(), ""); got != want.String() {
		t.Fatalf("sent %q, want %q", got, want.String())
	}
}
