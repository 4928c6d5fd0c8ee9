// Package sse reads and writes server-sent events, the framing every
// provider streams in.
package sse

import (
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
	src io.Reader
	sw  *Writer // the relay's writer (RelayTo), flushed before each read
	*buffers
}

// buffers are a Reader's, pooled: what it read of the stream and has not
// yet returned (buf[r:w]), how far it has read the event it is gathering,
// an event's data lines joined when it has more than one, and what it
// read after the stream ended.
type buffers struct {
	buf  []byte
	r, w int
	last [2]int // where the last event returned lies in buf, if it does
	err  error  // the stream's error, once it gave one
	ev   gathering
	data []byte
	tail []byte
	// lastName is the last event name, given again without a copy.
	lastName string
}

// gathering is how far a Reader has read the event at buf[r:]: offsets
// from r, which stay true when the bytes move to the buffer's start.
type gathering struct {
	next    int // where the next line to read starts
	scanned int // how far the line at next is known to go on unended
	start   int // where the event starts, after blank lines and comments
	name    string
	hasData bool
	// The data: one line's, at data0 (offset, length); or joined, in
	// buffers.data.
	data0  [2]int
	joined bool
}

// NewReader returns a Reader on r. Close gives its buffer back.
func NewReader(r io.Reader) *Reader {
	rd := &Reader{src: r}
	rd.buffers = readers.Get().(*buffers)
	return rd
}

// RelayTo makes rd write what sw.Relay was given, and flush sw, before
// every read of its stream that may wait: events that arrived together
// leave together (one write to the client instead of one each; those that
// lie side by side in rd's buffer, as the upstream sent them, without a
// copy) and never wait behind a slow upstream: the end of the stream is
// such a read too.
func (rd *Reader) RelayTo(sw *Writer) {
	rd.sw = sw
	sw.from = rd
}

// Close writes what is relayed and not yet written, and lets the reader's
// buffer serve another stream. The events it returned are not to be used
// after.
func (rd *Reader) Close() {
	if rd.sw != nil {
		rd.sw.flushPending()
		rd.sw.from = nil
	}
	b := rd.buffers
	if b == nil {
		return
	}
	rd.buffers = nil
	if cap(b.buf) <= maxPooledEvent && cap(b.data) <= maxPooledEvent && cap(b.tail) <= maxPooledEvent {
		*b = buffers{buf: b.buf[:cap(b.buf)], data: b.data[:0], tail: b.tail[:0]}
		readers.Put(b)
	}
}

// readers pools the buffers of Readers: an event is a few hundred bytes;
// a buffer grows to hold a longer one whole, and one that held an event
// over maxPooledEvent is left to the collector.
var readers = sync.Pool{New: func() any { return &buffers{buf: make([]byte, 4<<10)} }}

const maxPooledEvent = 64 << 10

// ErrTooLong is returned for an event over MaxEventBytes.
var ErrTooLong = errors.New("sse: event too long")

// Next returns the next event. It returns io.EOF at a clean end of stream,
// and io.ErrUnexpectedEOF when the stream ends inside an event.
func (rd *Reader) Next() (Event, error) {
	for {
		ev, n, ok := rd.gather(rd.buf[rd.r:rd.w])
		if ok && len(ev.Raw) > MaxEventBytes {
			return Event{}, ErrTooLong
		}
		if ok {
			rd.last = [2]int{rd.r + n - len(ev.Raw), rd.r + n}
			rd.r += n
			return ev, nil
		}
		rd.drop(rd.ev.start) // blank lines and comments before the event
		if rd.w-rd.r > MaxEventBytes {
			return Event{}, ErrTooLong
		}
		if rd.err != nil {
			// The stream is over: what the relay holds is written now, so
			// that its failure is seen before the relay ends.
			if rd.sw != nil {
				rd.sw.flushPending()
			}
			return rd.end()
		}
		rd.fill()
	}
}

// end is Next once the stream gave an error and what is left holds no
// whole event: at io.EOF, a final event without its blank line is
// delivered, as it arrived plus the newline that ends it (the fields of
// its lines that ended; an unended last line is kept in Raw only).
func (rd *Reader) end() (Event, error) {
	if !errors.Is(rd.err, io.EOF) {
		return Event{}, rd.err
	}
	rest := rd.buf[rd.r:rd.w]
	if len(bytes.TrimSpace(rest)) == 0 {
		return Event{}, io.EOF
	}
	ended := rest[:bytes.LastIndexByte(rest, '\n')+1]
	rd.tail = append(append(rd.tail[:0], ended...), '\n')
	rd.r, rd.ev, rd.last = rd.w, gathering{}, [2]int{}
	ev, _, ok := rd.gather(rd.tail)
	if !ok {
		return Event{}, io.ErrUnexpectedEOF
	}
	if len(ended) < len(rest) {
		// The raw bytes with the unended line; the data, if it was in
		// the tail, moves with them.
		data := ev.Data
		rd.data = append(rd.data[:0], data...)
		rd.tail = append(append(rd.tail[:0], rest...), '\n')
		ev.Raw, ev.Data = rd.tail, rd.data[:len(data):len(data)]
		if data == nil {
			ev.Data = nil
		}
	}
	return ev, nil
}

// Buffered returns the bytes rd has read and not returned, as they
// arrived: whole events, and perhaps the start of one. They are valid
// until rd's next Next, Fill, Take or Close. A relay that can tell a run of
// whole events at their start needs no look, one by one, passes it on
// with Take.
func (rd *Reader) Buffered() []byte { return rd.buf[rd.r:rd.w] }

// Fill reads the stream once more into what Buffered returns, writing and
// flushing the relay first, as Next does before it reads; it returns the
// stream's error (io.EOF at its end), and reads no more after one.
func (rd *Reader) Fill() error {
	if rd.err == nil {
		rd.fill()
	}
	return rd.err
}

// Take passes by the first n bytes of Buffered, which must end where an
// event ends, and returns them: Relay holds them as it holds an event's
// Raw, with the events beside them. Next goes on after them.
func (rd *Reader) Take(n int) []byte {
	p := rd.buf[rd.r : rd.r+n]
	rd.last = [2]int{rd.r, rd.r + n}
	rd.r += n
	rd.ev = gathering{} // what Next had read of the event there is behind
	return p
}

// lastAt returns where p lies in rd's buffer when it is the Raw of the
// last event rd returned from it (or the run Take passed by).
func (rd *Reader) lastAt(p []byte) (int, bool) {
	if rd == nil || rd.buffers == nil || len(p) == 0 || len(p) != rd.last[1]-rd.last[0] || &p[0] != &rd.buf[rd.last[0]] {
		return 0, false
	}
	return rd.last[0], true
}

// drop lets go of the first n bytes not yet returned, which the event
// being gathered does not reach back to.
func (rd *Reader) drop(n int) {
	if n == 0 {
		return
	}
	g := &rd.ev
	rd.r += n
	g.next -= n
	g.start -= n
	g.scanned = max(g.scanned-n, 0)
	if g.hasData && !g.joined {
		g.data0[0] -= n
	}
}

// fill reads more of the stream into buf, after writing what the relay
// holds of it: the bytes not yet returned move to its start, and it
// grows when they fill it.
func (rd *Reader) fill() {
	if rd.sw != nil {
		rd.sw.flushPending()
	}
	rd.last = [2]int{}
	if rd.r > 0 {
		rd.w = copy(rd.buf, rd.buf[rd.r:rd.w])
		rd.r = 0
	}
	if rd.w == len(rd.buf) {
		rd.buf = append(rd.buf, make([]byte, len(rd.buf))...)
		rd.buf = rd.buf[:cap(rd.buf)]
	}
	for range 100 { // as bufio does: a reader that reads nothing, many times, is broken
		n, err := rd.src.Read(rd.buf[rd.w:])
		rd.w += n
		if err != nil {
			rd.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	rd.err = io.ErrNoProgress
}

// gather reads the lines of b (the unreturned bytes, buf[r:w], or the
// tail) from where it stopped, and returns the event when its blank line
// is there: its fields, and slices of b for its raw bytes and its data
// (of a single data line; more are joined in rd.data), and how many
// bytes of b it took. A line's bytes are looked for its end once, however
// the stream was cut into reads.
func (rd *Reader) gather(b []byte) (Event, int, bool) {
	g := &rd.ev
	for g.next < len(b) {
		from := max(g.next, g.scanned)
		nl := bytes.IndexByte(b[from:], '\n')
		if nl < 0 {
			g.scanned = len(b) // an unended line: its end is further
			break
		}
		nl += from - g.next
		line := bytes.TrimRight(b[g.next:g.next+nl], "\r")
		lineAt := g.next
		g.next += nl + 1
		if len(line) == 0 {
			if !g.hasData && g.name == "" {
				g.start = g.next // stray blank line or comment-only event
				continue
			}
			// Slices no longer than they are: an append to one copies
			// rather than write over the events after it.
			ev := Event{Name: g.name, Raw: b[g.start:g.next:g.next]}
			switch {
			case g.joined:
				ev.Data = rd.data[:len(rd.data):len(rd.data)]
			case g.hasData:
				end := g.data0[0] + g.data0[1]
				ev.Data = b[g.data0[0]:end:end]
			}
			n := g.next
			*g = gathering{}
			return ev, n, true
		}
		if line[0] == ':' {
			continue // comment
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			g.name = rd.name(value)
		case "data":
			switch {
			case !g.hasData:
				g.data0 = [2]int{lineAt + len(line) - len(value), len(value)}
			case !g.joined:
				first := b[g.data0[0] : g.data0[0]+g.data0[1]]
				rd.data = append(append(append(rd.data[:0], first...), '\n'), value...)
				g.joined = true
			default:
				rd.data = append(append(rd.data, '\n'), value...)
			}
			g.hasData = true
		}
	}
	return Event{}, 0, false
}

// name is value as a string, the same string as the last event's name
// when it is the same: a stream names most of its events alike.
func (rd *Reader) name(value []byte) string {
	if string(value) != rd.lastName {
		rd.lastName = string(value)
	}
	return rd.lastName
}

// Writer writes events to an HTTP response, flushing each (or, for
// Relay, when the Reader it relays from is about to wait).
type Writer struct {
	w    http.ResponseWriter
	c    http.ResponseController // by value: one allocation a stream fewer
	from *Reader                 // the Reader whose events Relay is given (RelayTo)
	// held are relayed events not yet written: from.buf[held[0]:held[1]],
	// events that lay side by side there.
	held      [2]int
	unflushed bool  // written since the last flush
	err       error // the failure of a write or flush made by a Reader
}

// NewWriter returns a Writer on w. It does not write headers.
func NewWriter(w http.ResponseWriter) *Writer {
	return &Writer{w: w, c: *http.NewResponseController(w)}
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

// Err is the failure of a write or flush of relayed events made as the
// Reader went to read again: the client is gone.
func (sw *Writer) Err() error { return sw.err }

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

// Raw writes bytes already framed as events and flushes them, after
// what was relayed before.
func (sw *Writer) Raw(p []byte) error {
	if err := sw.writeHeld(); err != nil {
		return err
	}
	if _, err := sw.w.Write(p); err != nil {
		return err
	}
	return sw.Flush()
}

// Relay writes an event read from the Reader that was given this Writer
// by RelayTo; that Reader writes and flushes it before it next waits. The
// Raw of the Reader's last event is held, not copied, and written with
// the events beside it in one write.
func (sw *Writer) Relay(p []byte) error {
	if sw.err != nil {
		return sw.err
	}
	if at, ok := sw.from.lastAt(p); ok {
		if sw.held[1] == at && sw.held[1] > sw.held[0] {
			sw.held[1] += len(p)
			return nil
		}
		if err := sw.writeHeld(); err != nil {
			return err
		}
		sw.held = [2]int{at, at + len(p)}
		return nil
	}
	if err := sw.writeHeld(); err != nil {
		return err
	}
	if _, err := sw.w.Write(p); err != nil {
		return err
	}
	sw.unflushed = true
	return nil
}

// writeHeld writes the events Relay held.
func (sw *Writer) writeHeld() error {
	if sw.held[1] <= sw.held[0] {
		return nil
	}
	p := sw.from.buf[sw.held[0]:sw.held[1]]
	sw.held = [2]int{}
	sw.unflushed = true
	_, err := sw.w.Write(p)
	return err
}

// flushPending writes and flushes what was relayed, before the Reader
// reads again (or lets its buffer go); a failure is Relay's next answer.
func (sw *Writer) flushPending() {
	err := sw.writeHeld()
	if err == nil && sw.unflushed {
		sw.unflushed = false
		err = sw.Flush()
	}
	if err != nil && sw.err == nil {
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
