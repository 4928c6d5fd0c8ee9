// Package sse reads and writes server-sent events, the framing every
// provider streams in.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
)

// Event is one server-sent event. Raw is the event exactly as it arrived,
// including its terminating blank line, so it can be relayed unchanged.
// Data and Raw of an event a Reader returns are its buffers: valid until
// its next Next.
type Event struct {
	Name string // the "event:" field; "" for the default
	Data []byte // the "data:" lines joined with "\n"
	Raw  []byte
}

// MaxEventBytes bounds one event; a longer one is an error.
const MaxEventBytes = 4 << 20

// Reader reads events from a stream.
type Reader struct {
	src source
	*buffers
}

// buffers are what a Reader reads into, pooled: its read buffer, and the
// event it is gathering, as it arrived and its data.
type buffers struct {
	r         *bufio.Reader
	raw, data bytes.Buffer
}

// source is the stream under a Reader's buffer; before each read of it,
// which may wait, it flushes what a relay wrote since its last flush.
type source struct {
	r  io.Reader
	sw *Writer
}

func (s *source) Read(p []byte) (int, error) {
	if s.sw != nil && s.sw.pending {
		s.sw.flushPending()
	}
	return s.r.Read(p)
}

// NewReader returns a Reader on r. Close gives its buffer back.
func NewReader(r io.Reader) *Reader {
	rd := &Reader{src: source{r: r}}
	rd.buffers = readers.Get().(*buffers)
	rd.r.Reset(&rd.src)
	return rd
}

// RelayTo makes rd flush sw before every read of its stream that may
// wait, so that events written with sw.Relay leave together when they
// arrived together (one write to the client instead of one each) and never
// wait behind a slow upstream: the end of the stream is such a read too.
func (rd *Reader) RelayTo(sw *Writer) { rd.src.sw = sw }

// Close lets the reader's buffer serve another stream.
// The events it returned are not to be used after.
func (rd *Reader) Close() {
	b := rd.buffers
	if b == nil {
		return
	}
	rd.buffers = nil
	b.r.Reset(nil)
	if b.raw.Cap() <= maxPooledEvent && b.data.Cap() <= maxPooledEvent {
		b.raw.Reset()
		b.data.Reset()
		readers.Put(b)
	}
}

// readers pools the buffers of Readers: an event is a few hundred bytes,
// and a longer line is gathered whole anyway. One that held an event
// over maxPooledEvent is left to the collector.
var readers = sync.Pool{New: func() any { return &buffers{r: bufio.NewReaderSize(nil, 4<<10)} }}

const maxPooledEvent = 64 << 10

// ErrTooLong is returned for an event over MaxEventBytes.
var ErrTooLong = errors.New("sse: event too long")

// Next returns the next event. It returns io.EOF at a clean end of stream,
// and io.ErrUnexpectedEOF when the stream ends inside an event.
func (rd *Reader) Next() (Event, error) {
	rd.raw.Reset()
	rd.data.Reset()
	var ev Event
	data := &rd.data
	hasData := false
	for {
		line, err := rd.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(buf) > MaxEventBytes {
					return Event{}, ErrTooLong
				}
				line, err = rd.r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		if len(line) > 0 {
			rd.raw.Write(line)
			if rd.raw.Len() > MaxEventBytes {
				return Event{}, ErrTooLong
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if rd.raw.Len() == 0 || len(bytes.TrimSpace(rd.raw.Bytes())) == 0 {
					return Event{}, io.EOF
				}
				// A final event without its blank line: deliver it.
				if hasData || ev.Name != "" {
					ev.Data = data.Bytes()
					ev.Raw = append(rd.raw.Bytes(), '\n')
					return ev, nil
				}
				return Event{}, io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		if len(trimmed) == 0 {
			if !hasData && ev.Name == "" {
				rd.raw.Reset() // stray blank line or comment-only event
				continue
			}
			ev.Data = data.Bytes()
			ev.Raw = rd.raw.Bytes()
			return ev, nil
		}
		if trimmed[0] == ':' {
			continue // comment
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

// Writer writes events to an HTTP response, flushing each (or, for
// Relay, when the Reader it relays from is about to wait).
type Writer struct {
	w       http.ResponseWriter
	c       *http.ResponseController
	pending bool  // written by Relay since the last flush
	err     error // the failure of a flush made by a Reader
}

// NewWriter returns a Writer on w. It does not write headers.
func NewWriter(w http.ResponseWriter) *Writer {
	return &Writer{w: w, c: http.NewResponseController(w)}
}

// Header sets the headers of an event stream and writes the status.
func Header(w http.ResponseWriter, status int) {
	h := w.Header()
	// Canonical names and shared values, as Set would leave them but
	// without a new slice each: a capacity of one, so that an Add
	// appends to a copy.
	h["Content-Type"] = eventStream[0:1:1]
	h["Cache-Control"] = eventStream[1:2:2]
	h["X-Accel-Buffering"] = eventStream[2:3:3]
	delete(h, "Content-Length")
	w.WriteHeader(status)
}

// eventStream are the values of an event stream's headers (Header).
var eventStream = []string{"text/event-stream", "no-cache", "no"}

// Event writes one event with the given name ("" for none) and data.
func (sw *Writer) Event(name string, data []byte) error {
	var b bytes.Buffer
	if name != "" {
		b.WriteString("event: ")
		b.WriteString(name)
		b.WriteByte('\n')
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return sw.Raw(b.Bytes())
}

// Raw writes bytes already framed as events and flushes them.
func (sw *Writer) Raw(p []byte) error {
	if _, err := sw.w.Write(p); err != nil {
		return err
	}
	return sw.Flush()
}

// Relay writes an event read from the Reader that was given this Writer
// by RelayTo; that Reader flushes it before it next waits.
func (sw *Writer) Relay(p []byte) error {
	if sw.err != nil {
		return sw.err
	}
	if _, err := sw.w.Write(p); err != nil {
		return err
	}
	sw.pending = true
	return nil
}

func (sw *Writer) flushPending() {
	sw.pending = false
	if err := sw.Flush(); err != nil && sw.err == nil {
		sw.err = err
	}
}

// Flush sends what was written to the client now.
func (sw *Writer) Flush() error {
	if err := sw.c.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
