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

// decodeBytes is decode's pure half, fuzzed on its own. It reads exactly
// one JSON value into v and refuses what encoding/json would let through:
// a field name that matches only when case is ignored, a key given twice,
// and bytes that are not UTF-8 (which the decoder would silently replace).
// Its messages name the field and never a Go type.
func decodeBytes(data []byte, v any) error {
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
	if err := w.value(reflect.TypeOf(v), ""); err != nil {
		return err
	}
	if _, err := w.dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON body", errDecode)
	}
	return nil
}

// walker checks a JSON document's keys against the Go type it decodes into.
type walker struct {
	data []byte
	dec  *json.Decoder
	prev int64 // the input offset before the token being read
}

func (w *walker) token(path string) (json.Token, error) {
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
			return nil, fmt.Errorf("%w: %s is not valid UTF-8", errDecode, where(path))
		}
	}
	return tok, nil
}

// value checks the next value, decoded into a t (nil: anything).
func (w *walker) value(t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	opaque := t == nil || t == reflect.TypeOf(json.RawMessage(nil)) || t == reflect.TypeOf(time.Time{}) || t.Kind() == reflect.Interface
	tok, err := w.token(path)
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
			if err := w.value(elem, path+"["+strconv.Itoa(i)+"]"); err != nil {
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
			ktok, err := w.token(path)
			if err != nil {
				return err
			}
			k := ktok.(string)
			at := join(path, k)
			if seen[k] {
				return fmt.Errorf("%w: %s is given twice", errDecode, where(at))
			}
			seen[k] = true
			var ft reflect.Type
			if isStruct {
				var known bool
				if ft, known = fields[k]; !known {
					for name := range fields {
						if strings.EqualFold(name, k) {
							return fmt.Errorf("%w: unknown field %q (field names are case-sensitive: did you mean %q?)", errDecode, at, join(path, name))
						}
					}
					return fmt.Errorf("%w: unknown field %q", errDecode, at)
				}
			} else if !opaque && t.Kind() == reflect.Map {
				ft = t.Elem()
			}
			if err := w.value(ft, at); err != nil {
				return err
			}
		}
	}
	_, err = w.token(path) // the closing delimiter
	return err
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
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
