package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// fieldTypes caches fieldsOf by type.
var fieldTypes sync.Map // reflect.Type -> map[string]reflect.Type

// fieldsOf maps a struct's JSON field names to their types. The fields of
// an embedded struct without a JSON name of its own are inline, as
// encoding/json decodes them (TurnRequest's trace context); a field of the
// outer struct wins over an embedded one of the same name.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldTypes.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	fields := map[string]reflect.Type{}
	var inline []reflect.Type
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				inline = append(inline, et)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	for _, et := range inline {
		for name, ft := range fieldsOf(et) {
			if _, ok := fields[name]; !ok {
				fields[name] = ft
			}
		}
	}
	fieldTypes.Store(t, fields)
	return fields
}

// quickCheck reports whether data is one JSON value that the walker would
// accept for a t: valid UTF-8, every key of a struct's object one of its
// field names exactly, no key given twice, nothing after the value. It
// allocates nothing; false means "walk it" (the walker finds the problem
// and words it), never that the body is bad. Keys with escapes, deep or
// wide objects go to the walker too.
func quickCheck(data []byte, t reflect.Type) bool {
	if !utf8.Valid(data) {
		return false
	}
	q := quick{data: data}
	if !q.value(t, 0) {
		return false
	}
	q.space()
	return q.i == len(q.data)
}

type quick struct {
	data []byte
	i    int
}

func (q *quick) space() {
	for q.i < len(q.data) {
		switch q.data[q.i] {
		case ' ', '\t', '\n', '\r':
			q.i++
		default:
			return
		}
	}
}

// skip passes white space, then c if it comes next; it reports whether c
// came.
func (q *quick) skip(c byte) bool {
	q.space()
	if q.i < len(q.data) && q.data[q.i] == c {
		q.i++
		return true
	}
	return false
}

var (
	rawType  = reflect.TypeOf(json.RawMessage(nil))
	timeType = reflect.TypeOf(time.Time{})
)

// value scans one value for a t (nil: anything).
func (q *quick) value(t reflect.Type, depth int) bool {
	if depth > 16 {
		return false
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t == rawType || t == timeType || t.Kind() == reflect.Interface) {
		t = nil
	}
	q.space()
	if q.i >= len(q.data) {
		return false
	}
	switch c := q.data[q.i]; {
	case c == '{':
		return q.object(t, depth)
	case c == '[':
		q.i++
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		if q.skip(']') {
			return true
		}
		for {
			if !q.value(elem, depth+1) {
				return false
			}
			if q.skip(']') {
				return true
			}
			if !q.skip(',') {
				return false
			}
		}
	case c == '"':
		_, ok := q.str()
		return ok
	default:
		// A number or a literal: the decoder checks its spelling. A number
		// with an exponent or of many digits may not fit a float64, which
		// the walker refuses: it goes there.
		start := q.i
		for q.i < len(q.data) {
			switch q.data[q.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return q.token(start)
			case 'e', 'E':
				if c != 't' && c != 'f' { // true and false have an e
					return false
				}
			}
			q.i++
		}
		return q.token(start)
	}
}

// token reports whether the number or literal from start is one the scan
// may pass: short, and a literal spelled whole ("null0" is not null).
func (q *quick) token(start int) bool {
	if q.i == start {
		return false
	}
	switch tok := string(q.data[start:q.i]); tok[0] {
	case 't', 'f', 'n':
		return tok == "true" || tok == "false" || tok == "null"
	}
	return q.i > start && q.i-start <= 15
}

// object scans an object; keys are checked when t is a struct.
func (q *quick) object(t reflect.Type, depth int) bool {
	q.i++
	var fields map[string]reflect.Type
	isStruct := t != nil && t.Kind() == reflect.Struct
	if isStruct {
		fields = fieldsOf(t)
	}
	var elem reflect.Type
	if t != nil && t.Kind() == reflect.Map {
		elem = t.Elem()
	}
	var seen [24][]byte
	n := 0
	if q.skip('}') {
		return true
	}
	for {
		q.space()
		k, ok := q.str()
		if !ok || n == len(seen) {
			return false
		}
		for _, s := range seen[:n] {
			if bytes.Equal(s, k) {
				return false
			}
		}
		seen[n] = k
		n++
		ft := elem
		if isStruct {
			if ft, ok = fields[string(k)]; !ok {
				return false
			}
		}
		if !q.skip(':') || !q.value(ft, depth+1) {
			return false
		}
		if q.skip('}') {
			return true
		}
		if !q.skip(',') {
			return false
		}
	}
}

// str scans a string and returns its raw contents; a string with an
// escape is accepted as a value but not as a key (its bytes are not its
// text), so a key with one goes to the walker.
func (q *quick) str() ([]byte, bool) {
	if q.i >= len(q.data) || q.data[q.i] != '"' {
		return nil, false
	}
	q.i++
	start, escaped := q.i, false
	for q.i < len(q.data) {
		switch c := q.data[q.i]; {
		case c == '"':
			s := q.data[start:q.i]
			q.i++
			if escaped {
				return nil, true
			}
			return s, true
		case c == '\\':
			escaped = true
			q.i += 2
		case c < 0x20:
			return nil, false
		default:
			q.i++
		}
	}
	return nil, false
}
