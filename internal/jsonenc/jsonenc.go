// Package jsonenc appends JSON as encoding/json writes it, byte for byte,
// without its reflection and its allocations: for the few records written
// on every turn (a run record, an ACP prompt).
package jsonenc

import (
	"encoding/json"
	"time"
	"unicode/utf8"
)

// AppendString appends s as json.Marshal encodes a string (HTML escaping
// on): the same bytes.
func AppendString(dst []byte, s string) []byte { return appendString(dst, s, false) }

// AppendSDKText appends s as the ACP SDK encodes a text block's text: as
// AppendString, except that a byte that is not UTF-8 becomes U+FFFD itself
// rather than its escape (the SDK decodes its own encoding of the block
// and encodes that again).
func AppendSDKText(dst []byte, s string) []byte { return appendString(dst, s, true) }

// appendString is AppendString, or with text set AppendSDKText.
func appendString(dst []byte, s string, text bool) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			if text {
				dst = append(dst, "\uFFFD"...)
			} else {
				dst = append(dst, `\ufffd`...)
			}
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// StringLen is the length of AppendString's encoding of s: a buffer of
// that much room takes it without growing.
func StringLen(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
				n++
			case b < 0x20 || b == '<' || b == '>' || b == '&':
				n += 5
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 5 // \ufffd for one byte
		case r == '\u2028' || r == '\u2029':
			n += 3 // \u202x for three bytes
		}
		i += size
	}
	return n
}

// AppendTime appends t as json.Marshal encodes a time.Time (RFC 3339 with
// nanoseconds, quoted); ok is false where Marshal fails (a year outside
// 0-9999, say), and dst is then as it was.
func AppendTime(dst []byte, t time.Time) (_ []byte, ok bool) {
	n := len(dst)
	out, err := t.AppendText(append(dst, '"'))
	if err != nil {
		return dst[:n], false
	}
	return append(out, '"'), true
}

// Plain reports whether raw is valid JSON exactly as json.Marshal writes a
// json.RawMessage: compact (no space outside strings) and with nothing it
// escapes for HTML (<, >, &, U+2028, U+2029). Such raw bytes can be
// appended as they are.
func Plain(raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	in, esc := false, false
	for i, c := range raw {
		switch {
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xA8 || raw[i+2] == 0xA9):
			return false
		}
		if in {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				in = false
			}
			continue
		}
		switch c {
		case '"':
			in = true
		case ' ', '\t', '\n', '\r':
			return false
		}
	}
	return json.Valid(raw)
}
