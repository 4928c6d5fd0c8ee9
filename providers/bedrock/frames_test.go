package bedrock

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

func encodeFrame(t testing.TB, typ string, payload string) []byte {
	var buf bytes.Buffer
	err := eventstream.NewEncoder().Encode(&buf, eventstream.Message{Payload: []byte(payload), Headers: eventstream.Headers{
		{Name: ":message-type", Value: eventstream.StringValue("event")},
		{Name: ":event-type", Value: eventstream.StringValue(typ)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Frames are read whole and checked: a frame that claims more than
// MaxFrameBytes, headers longer than itself, a broken checksum or a cut
// end is errBadFrame, never a buffer as large as the upstream claims.
func TestFramesRefuseMalformed(t *testing.T) {
	good := encodeFrame(t, "messageStart", `{"role":"assistant"}`)
	f := newFrames(bytes.NewReader(append(append([]byte{}, good...), good...)))
	for range 2 {
		fr, err := f.next()
		if err != nil || fr.Event != "messageStart" || string(fr.Payload) != `{"role":"assistant"}` {
			t.Fatalf("good frame: %+v %v", fr, err)
		}
	}
	if _, err := f.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	flip := append([]byte{}, good...)
	flip[len(flip)-6] ^= 0xff
	huge := append([]byte{}, good...)
	huge[0], huge[1] = 0x7f, 0xff
	headers := append([]byte{}, good...)
	headers[4] = 0x7f
	for name, b := range map[string][]byte{"checksum": flip, "huge": huge, "headers": headers, "cut": good[:len(good)-3], "short": {0, 0, 0}} {
		if _, err := newFrames(bytes.NewReader(b)).next(); !errors.Is(err, errBadFrame) {
			t.Errorf("%s: %v, want errBadFrame", name, err)
		}
	}
}

// Any bytes as a stream end in frames or an error, never a panic, and
// each frame read is bounded.
func FuzzFrames(f *testing.F) {
	f.Add(encodeFrame(f, "contentBlockDelta", `{"delta":{"text":"hi"}}`))
	f.Add([]byte{0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := newFrames(bytes.NewReader(b))
		for range 64 {
			m, err := fr.next()
			if err != nil {
				return
			}
			if len(m.Payload) > MaxFrameBytes {
				t.Fatalf("a payload of %d bytes", len(m.Payload))
			}
		}
	})
}
