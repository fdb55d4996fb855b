// Package elicit owns the forms an agent asks a person to fill in (ACP's
// elicitation/create, form mode): the restricted JSON Schema they are
// written in, and whether an answer fits the form it answers. It is pure:
// the run keeps the request, the API takes the answer, this package only
// reads schemas and values.
package elicit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Actions a person (or what stands in for one) answers a form with, as ACP
// names them.
const (
	Accept  = "accept"  // the person filled in the form: the content goes back
	Decline = "decline" // the person refused to answer
	Cancel  = "cancel"  // nobody answered: dismissed, timed out, the run ended
)

// Errors callers tell apart with errors.Is.
var (
	// ErrBadSchema: the agent's form is not the flat object elicitation
	// allows.
	ErrBadSchema = errors.New("elicitation schema outside the allowed subset")
	// ErrBadContent: an answer does not fit the form it answers.
	ErrBadContent = errors.New("answer does not fit the requested schema")
)

// Property is one field of a form: a string (a single-select enum when
// Enum is set), a number, an integer, a boolean, or an array of strings
// from Enum (a multi-select).
type Property struct {
	Type      string
	Enum      []string // the values allowed (string or each array item); nil: any
	MinLength *int
	MaxLength *int
	Pattern   *regexp.Regexp
	Format    string
	Minimum   *float64
	Maximum   *float64
	MinItems  *int
	MaxItems  *int
}

// Schema is a form as an agent requested it.
type Schema struct {
	Properties map[string]Property
	Required   []string
}

// wireProperty is a property as the schema's JSON writes it.
type wireProperty struct {
	Type      string       `json:"type"`
	Enum      []string     `json:"enum"`
	OneOf     []wireOption `json:"oneOf"`
	Items     *wireItems   `json:"items"`
	MinLength *int         `json:"minLength"`
	MaxLength *int         `json:"maxLength"`
	Pattern   *string      `json:"pattern"`
	Format    *string      `json:"format"`
	Minimum   *float64     `json:"minimum"`
	Maximum   *float64     `json:"maximum"`
	MinItems  *int         `json:"minItems"`
	MaxItems  *int         `json:"maxItems"`
}

type wireOption struct {
	Const string `json:"const"`
}

type wireItems struct {
	Enum  []string     `json:"enum"`
	AnyOf []wireOption `json:"anyOf"`
}

type wireSchema struct {
	Type       string                  `json:"type"`
	Properties map[string]wireProperty `json:"properties"`
	Required   []string                `json:"required"`
}

// Parse reads a requested schema: an object whose properties are each a
// string (plain, with a format, or a single-select enum by enum or oneOf),
// a number, an integer, a boolean, or an array of strings picked from an
// enum (multi-select). Anything else is ErrBadSchema, naming the property.
func Parse(raw json.RawMessage) (Schema, error) {
	var w wireSchema
	if len(bytes.TrimSpace(raw)) == 0 {
		return Schema{}, fmt.Errorf("%w: no schema", ErrBadSchema)
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return Schema{}, fmt.Errorf("%w: %v", ErrBadSchema, err)
	}
	if w.Type != "" && w.Type != "object" {
		return Schema{}, fmt.Errorf("%w: type %q, not object", ErrBadSchema, w.Type)
	}
	s := Schema{Properties: make(map[string]Property, len(w.Properties)), Required: w.Required}
	for name, wp := range w.Properties {
		p, err := property(wp)
		if err != nil {
			return Schema{}, fmt.Errorf("%w: property %q: %v", ErrBadSchema, name, err)
		}
		s.Properties[name] = p
	}
	for _, name := range w.Required {
		if _, ok := s.Properties[name]; !ok {
			return Schema{}, fmt.Errorf("%w: required property %q is not among the properties", ErrBadSchema, name)
		}
	}
	return s, nil
}

func property(wp wireProperty) (Property, error) {
	p := Property{Type: wp.Type, MinLength: wp.MinLength, MaxLength: wp.MaxLength, Minimum: wp.Minimum, Maximum: wp.Maximum, MinItems: wp.MinItems, MaxItems: wp.MaxItems}
	switch wp.Type {
	case "string":
		p.Enum = wp.Enum
		for _, o := range wp.OneOf {
			p.Enum = append(p.Enum, o.Const)
		}
		if wp.Format != nil {
			switch *wp.Format {
			case "email", "uri", "date", "date-time":
				p.Format = *wp.Format
			default:
				return p, fmt.Errorf("format %q", *wp.Format)
			}
		}
		if wp.Pattern != nil {
			re, err := regexp.Compile(*wp.Pattern)
			if err != nil {
				// An ECMAScript pattern Go cannot read is left to the agent,
				// which checks its own form again.
				break
			}
			p.Pattern = re
		}
	case "number", "integer", "boolean":
	case "array":
		if wp.Items == nil {
			return p, errors.New("array without items")
		}
		p.Enum = wp.Items.Enum
		for _, o := range wp.Items.AnyOf {
			p.Enum = append(p.Enum, o.Const)
		}
		if p.Enum == nil {
			return p, errors.New("array items name no values (enum or anyOf)")
		}
	default:
		return p, fmt.Errorf("type %q", wp.Type)
	}
	return p, nil
}

// Check reports whether content answers s: every required property
// present, no property s does not list, each value of its property's type
// and within its bounds. Numbers are read exactly (decode content with
// UseNumber, or pass float64s).
func (s Schema) Check(content map[string]any) error {
	for _, name := range s.Required {
		if _, ok := content[name]; !ok {
			return fmt.Errorf("%w: required property %q is missing", ErrBadContent, name)
		}
	}
	names := make([]string, 0, len(content))
	for name := range content {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p, ok := s.Properties[name]
		if !ok {
			return fmt.Errorf("%w: property %q is not in the form (it has %s)", ErrBadContent, name, strings.Join(s.names(), ", "))
		}
		if err := p.check(content[name]); err != nil {
			return fmt.Errorf("%w: property %q: %v", ErrBadContent, name, err)
		}
	}
	return nil
}

func (s Schema) names() []string {
	out := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func (p Property) check(v any) error {
	switch p.Type {
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("want a string, got %s", kind(v))
		}
		return p.checkString(str)
	case "number", "integer":
		f, ok := number(v)
		if !ok {
			return fmt.Errorf("want a %s, got %s", p.Type, kind(v))
		}
		if p.Type == "integer" && f != math.Trunc(f) {
			return fmt.Errorf("want an integer, got %v", f)
		}
		if p.Minimum != nil && f < *p.Minimum {
			return fmt.Errorf("%v is below the minimum %v", f, *p.Minimum)
		}
		if p.Maximum != nil && f > *p.Maximum {
			return fmt.Errorf("%v is above the maximum %v", f, *p.Maximum)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("want a boolean, got %s", kind(v))
		}
	case "array":
		return p.checkArray(v)
	}
	return nil
}

func (p Property) checkString(s string) error {
	n := utf8.RuneCountInString(s)
	switch {
	case p.Enum != nil && !slices.Contains(p.Enum, s):
		return fmt.Errorf("%q is not one of %q", s, p.Enum)
	case p.MinLength != nil && n < *p.MinLength:
		return fmt.Errorf("shorter than %d characters", *p.MinLength)
	case p.MaxLength != nil && n > *p.MaxLength:
		return fmt.Errorf("longer than %d characters", *p.MaxLength)
	case p.Pattern != nil && !p.Pattern.MatchString(s):
		return fmt.Errorf("%q does not match %q", s, p.Pattern.String())
	}
	return checkFormat(p.Format, s)
}

func checkFormat(format, s string) error {
	var err error
	switch format {
	case "email":
		_, err = mail.ParseAddress(s)
	case "uri":
		var u *url.URL
		if u, err = url.Parse(s); err == nil && u.Scheme == "" {
			err = errors.New("no scheme")
		}
	case "date":
		_, err = time.Parse(time.DateOnly, s)
	case "date-time":
		_, err = time.Parse(time.RFC3339, s)
	}
	if err != nil {
		return fmt.Errorf("%q is not a %s: %v", s, format, err)
	}
	return nil
}

func (p Property) checkArray(v any) error {
	items, ok := v.([]any)
	if !ok {
		return fmt.Errorf("want an array of strings, got %s", kind(v))
	}
	if p.MinItems != nil && len(items) < *p.MinItems {
		return fmt.Errorf("fewer than %d items", *p.MinItems)
	}
	if p.MaxItems != nil && len(items) > *p.MaxItems {
		return fmt.Errorf("more than %d items", *p.MaxItems)
	}
	for _, it := range items {
		s, ok := it.(string)
		if !ok {
			return fmt.Errorf("want string items, got %s", kind(it))
		}
		if !slices.Contains(p.Enum, s) {
			return fmt.Errorf("%q is not one of %q", s, p.Enum)
		}
	}
	return nil
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64, int, int64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
