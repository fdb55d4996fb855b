package apitype

import (
	"bytes"
	"encoding/json"
	"errors"
)

// LineDecoder decodes one whole line of a JSON-lines stream at a time, as
// json.Unmarshal would, with one json.Decoder kept across lines:
// Unmarshal makes its decoding state anew for every call, which is most of
// what a small line costs. The client reads run events with it, the daemon
// an agent's ACP lines. Not safe for concurrent use; the zero value is
// ready.
type LineDecoder struct {
	src bytes.Reader
	dec *json.Decoder
	fed int64 // the bytes of the lines before this one, all given to dec
}

// LineDecoderKeep: a decoder whose buffer grew past this for a long line
// is dropped after it, not kept for the stream's life.
const LineDecoderKeep = 256 << 10

// Decode decodes line into v, refusing what json.Unmarshal refuses.
func (d *LineDecoder) Decode(line []byte, v any) error {
	d.src.Reset(line)
	if d.dec == nil {
		d.dec, d.fed = json.NewDecoder(&d.src), 0
	}
	err := d.dec.Decode(v)
	// Unmarshal refuses anything but space after the value; what came
	// before this line was space after the value of the one before.
	if end := d.dec.InputOffset() - d.fed; err == nil && (end < 0 || end > int64(len(line)) || len(bytes.TrimSpace(line[end:])) > 0) {
		err = errors.New("invalid character after top-level value")
	}
	d.fed += int64(len(line))
	if err != nil || len(line) > LineDecoderKeep {
		d.dec = nil // a decoder that failed keeps failing
	}
	return err
}
