package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxDepth is how deeply a request body may nest objects and arrays. The
// deepest body the API defines nests three levels; anything beyond
// MaxDepth is refused (400 nesting_too_deep) before it is decoded.
const MaxDepth = 64

// errTooDeep classifies a body nested deeper than MaxDepth.
var errTooDeep = fmt.Errorf("%w: nesting too deep", errDecode)

// depthScanner follows a JSON text's strings and brackets byte by byte and
// fails at the first bracket that opens level MaxDepth+1. It keeps three
// words of state, whatever the input, so a body of any depth costs one
// pass over the bytes read so far and no memory. Malformed JSON may fool
// the count; the decoder refuses such a body anyway.
type depthScanner struct {
	depth    int
	inString bool
	escaped  bool
	offset   int64 // bytes scanned before the current chunk
}

func (s *depthScanner) scan(p []byte) error {
	for i, c := range p {
		switch {
		case s.inString:
			switch {
			case s.escaped:
				s.escaped = false
			case c == '\\':
				s.escaped = true
			case c == '"':
				s.inString = false
			}
		case c == '"':
			s.inString = true
		case c == '{' || c == '[':
			s.depth++
			if s.depth > MaxDepth {
				return fmt.Errorf("%w: the body nests objects and arrays deeper than %d levels (at byte %d)", errTooDeep, MaxDepth, s.offset+int64(i))
			}
		case c == '}' || c == ']':
			s.depth--
		}
	}
	s.offset += int64(len(p))
	return nil
}

// depthReader scans what it reads and fails as soon as the body nests
// too deep, before the rest of the body is read.
type depthReader struct {
	r io.Reader
	s depthScanner
}

func (d *depthReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if serr := d.s.scan(p[:n]); serr != nil {
		return n, serr
	}
	return n, err
}

// decodeBytes is decode's pure half, fuzzed on its own. It reads exactly
// one JSON value into v and refuses what encoding/json would let through:
// nesting deeper than MaxDepth, a field name that matches only when case
// is ignored, a key given twice, and bytes that are not UTF-8 (which the
// decoder would silently replace). Its messages name the field and never a
// Go type.
func decodeBytes(data []byte, v any) error {
	var s depthScanner
	if err := s.scan(data); err != nil {
		return err
	}
	return decodeScanned(data, v)
}

// decodeScanned is decodeBytes for a body whose depth was checked.
func decodeScanned(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%w: the request body is empty; send a JSON object", errDecode)
	}
	// A body the quick scan accepts needs no walk: the walk's token reader
	// allocates per token, and every turn request is decoded here. One the
	// decoder then refuses is walked after all, for the walk's words.
	quick := quickCheck(data, reflect.TypeOf(v))
	if !quick {
		if err := walk(data, v); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if quick {
			if werr := walk(data, v); werr != nil {
				return werr
			}
		}
		return fmt.Errorf("%w: %s", errDecode, describe(err))
	}
	return nil
}

// walk checks data against v's type with the walker.
func walk(data []byte, v any) error {
	w := walker{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	if err := w.value(reflect.TypeOf(v)); err != nil {
		return err
	}
	if _, err := w.dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON body", errDecode)
	}
	return nil
}

// walker checks a JSON document's keys against the Go type it decodes into.
// It keeps the path to the value it is in as a stack and spells it out
// only for an error, so a level costs no string building.
type walker struct {
	data []byte
	dec  *json.Decoder
	prev int64     // the input offset before the token being read
	path []pathSeg // where the walk is: keys and array indexes
}

// pathSeg is one step of a path: an object key, or an array index when
// key is "" and index >= 0.
type pathSeg struct {
	key   string
	index int
}

// at spells the current path out, as in "messages[0].id"; key, when not
// "", is one more step.
func (w *walker) at(key string) string {
	var b strings.Builder
	for _, s := range w.path {
		if s.index >= 0 {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.key)
	}
	if key != "" {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(key)
	}
	return b.String()
}

func (w *walker) token() (json.Token, error) {
	w.prev = w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		var se *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("%w: the JSON body ends early (unexpected EOF)", errDecode)
		case errors.As(err, &se):
			return nil, fmt.Errorf("%w: malformed JSON at byte %d: %s", errDecode, se.Offset, strings.TrimPrefix(se.Error(), "json: "))
		}
		return nil, fmt.Errorf("%w: malformed JSON: %s", errDecode, strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, ok := tok.(string); ok {
		if raw := w.data[w.prev:w.dec.InputOffset()]; !utf8.Valid(raw) {
			return nil, fmt.Errorf("%w: %s is not valid UTF-8", errDecode, where(w.at("")))
		}
	}
	return tok, nil
}

// value checks the next value, decoded into a t (nil: anything). Its
// recursion is bounded: the body was checked for depth first.
func (w *walker) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	opaque := t == nil || t == reflect.TypeOf(json.RawMessage(nil)) || t == reflect.TypeOf(time.Time{}) || t.Kind() == reflect.Interface
	tok, err := w.token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch delim {
	case '[':
		var elem reflect.Type
		if !opaque && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More(); i++ {
			w.path = append(w.path, pathSeg{index: i})
			err := w.value(elem)
			w.path = w.path[:len(w.path)-1]
			if err != nil {
				return err
			}
		}
	case '{':
		isStruct := !opaque && t.Kind() == reflect.Struct
		var fields map[string]reflect.Type
		if isStruct {
			fields = fieldsOf(t)
		}
		seen := map[string]bool{}
		for w.dec.More() {
			ktok, err := w.token()
			if err != nil {
				return err
			}
			k := ktok.(string)
			if seen[k] {
				return fmt.Errorf("%w: %s is given twice", errDecode, where(w.at(k)))
			}
			seen[k] = true
			var ft reflect.Type
			if isStruct {
				var known bool
				if ft, known = fields[k]; !known {
					for name := range fields {
						if strings.EqualFold(name, k) {
							return fmt.Errorf("%w: unknown field %q (field names are case-sensitive: did you mean %q?)", errDecode, w.at(k), w.at(name))
						}
					}
					return fmt.Errorf("%w: unknown field %q", errDecode, w.at(k))
				}
			} else if !opaque && t.Kind() == reflect.Map {
				ft = t.Elem()
			}
			w.path = append(w.path, pathSeg{key: k, index: -1})
			err = w.value(ft)
			w.path = w.path[:len(w.path)-1]
			if err != nil {
				return err
			}
		}
	}
	_, err = w.token() // the closing delimiter
	return err
}

func where(path string) string {
	if path == "" {
		return "the body"
	}
	return "field " + strconv.Quote(path)
}

// describe words a decoding error for a person: the field and the JSON
// kinds, never the Go type it would have filled.
func describe(err error) string {
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return fmt.Sprintf("the body must be a JSON %s, got %s", kindOf(te.Type), te.Value)
		}
		return fmt.Sprintf("field %q must be a JSON %s, got %s", field, kindOf(te.Type), te.Value)
	case errors.As(err, &pe):
		return fmt.Sprintf("%q is not an RFC 3339 time such as 2026-12-01T09:00:00Z", pe.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func kindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeOf(time.Time{}):
		return "string holding an RFC 3339 time"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "whole number"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return "value"
}
