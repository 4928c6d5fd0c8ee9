package bedrock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// MaxFrameBytes bounds one frame of an event stream: Bedrock's events are
// a few hundred bytes; a longer frame is an upstream error, never a
// buffer that grows with what the upstream claims.
const MaxFrameBytes = 1 << 20

// frames reads an application/vnd.amazon.eventstream body frame by frame.
// Each frame's lengths are checked before it is read, and its checksums by
// the SDK's decoder.
type frames struct {
	r   io.Reader
	dec *eventstream.Decoder
	buf []byte
	pay []byte
}

func newFrames(r io.Reader) *frames {
	return &frames{r: r, dec: eventstream.NewDecoder()}
}

// frame is one decoded event: an event (Type its :event-type), or an
// exception or error (Code and its message in Payload).
type frame struct {
	Event   string // :event-type, for an event
	Code    string // the exception's or error's code; "" for an event
	Payload []byte // valid until the next call of next
}

// errBadFrame is a stream that is not a well-formed event stream.
var errBadFrame = errors.New("malformed event stream")

// next returns the next frame; io.EOF at a clean end between frames.
func (f *frames) next() (frame, error) {
	var prelude [12]byte
	if _, err := io.ReadFull(f.r, prelude[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return frame{}, io.EOF
		}
		return frame{}, fmt.Errorf("%w: %v", errBadFrame, err)
	}
	total := binary.BigEndian.Uint32(prelude[0:4])
	headers := binary.BigEndian.Uint32(prelude[4:8])
	// prelude (12) + headers + payload + message CRC (4)
	if total < 16 || total > MaxFrameBytes || headers > total-16 {
		return frame{}, fmt.Errorf("%w: a frame of %d bytes with %d of headers", errBadFrame, total, headers)
	}
	if cap(f.buf) < int(total) {
		f.buf = make([]byte, total)
	}
	f.buf = f.buf[:total]
	copy(f.buf, prelude[:])
	if _, err := io.ReadFull(f.r, f.buf[len(prelude):]); err != nil {
		return frame{}, fmt.Errorf("%w: %v", errBadFrame, err)
	}
	m, err := f.dec.Decode(bytes.NewReader(f.buf), f.pay[:0])
	if err != nil {
		return frame{}, fmt.Errorf("%w: %v", errBadFrame, err)
	}
	f.pay = m.Payload
	out := frame{Payload: m.Payload}
	switch header(m, ":message-type") {
	case "event":
		out.Event = header(m, ":event-type")
		if out.Event == "" {
			return frame{}, fmt.Errorf("%w: an event without a type", errBadFrame)
		}
	case "exception":
		out.Code = errorCode(header(m, ":exception-type"))
	case "error":
		out.Code = errorCode(header(m, ":error-code"))
		out.Payload = []byte(header(m, ":error-message"))
	default:
		return frame{}, fmt.Errorf("%w: message type %q", errBadFrame, header(m, ":message-type"))
	}
	if out.Code == "" && out.Event == "" {
		out.Code = "InternalServerException"
	}
	return out, nil
}

// header returns a string header of m, or "".
func header(m eventstream.Message, name string) string {
	v := m.Headers.Get(name)
	if v == nil {
		return ""
	}
	if s, ok := v.(eventstream.StringValue); ok {
		return string(s)
	}
	return v.String()
}
