package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// joinKey encodes parts as uvarint length + bytes each, so the result is
// unambiguous whatever bytes the parts hold, and the encoding of a leading
// subset of parts is a prefix of the whole.
func joinKey(parts ...string) []byte {
	n := 0
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

var errBadKey = errors.New("malformed composite key")

// splitKey decodes want parts from a joinKey encoding; the parts are copies.
func splitKey(b []byte, want int) ([]string, error) {
	out, rest, err := cutKey(b, want)
	if err == nil && len(rest) != 0 {
		err = errBadKey
	}
	return out, err
}

// cutKey decodes want leading joinKey parts of b and returns the bytes
// after them.
func cutKey(b []byte, want int) ([]string, []byte, error) {
	out := make([]string, 0, want)
	for range want {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return nil, nil, errBadKey
		}
		out = append(out, string(b[n:n+int(l)]))
		b = b[n+int(l):]
	}
	return out, b, nil
}

func u64(v uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, v)
}

// timeKey is t as 8 bytes whose byte order is time order (UnixNano with the
// sign bit flipped); times outside UnixNano's range clamp to its ends.
func timeKey(t time.Time) []byte {
	var n int64
	switch {
	case t.Year() < 1678:
		n = math.MinInt64
	case t.Year() > 2261:
		n = math.MaxInt64
	default:
		n = t.UnixNano()
	}
	return u64(uint64(n) ^ (1 << 63))
}

// keyTime decodes a timeKey.
func keyTime(k []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k)^(1<<63))).UTC()
}

// msgKey is the msgs index key: created_at then id, so a cursor walks
// messages in (created_at, id) order.
func msgKey(at time.Time, id string) []byte {
	return append(timeKey(at), id...)
}

// successor is the smallest key greater than every key with prefix p, or
// nil when there is none.
func successor(p []byte) []byte {
	s := bytes.Clone(p)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] < 0xff {
			s[i]++
			return s[:i+1]
		}
	}
	return nil
}
