package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/residentd/residentd/apitype"
)

// formField is one property of an elicitation's form as the terminal asks
// it.
type formField struct {
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Enum        []string `json:"enum"`
	OneOf       []struct {
		Const string `json:"const"`
		Title string `json:"title"`
	} `json:"oneOf"`
	Items *struct {
		Enum  []string `json:"enum"`
		AnyOf []struct {
			Const string `json:"const"`
		} `json:"anyOf"`
	} `json:"items"`
}

// choices are the values a field may take, when it lists them.
func (f formField) choices() []string {
	out := slices.Clone(f.Enum)
	for _, o := range f.OneOf {
		out = append(out, o.Const)
	}
	if f.Items != nil {
		out = append(out, f.Items.Enum...)
		for _, o := range f.Items.AnyOf {
			out = append(out, o.Const)
		}
	}
	return out
}

// value reads a typed answer for the field from what the person typed.
func (f formField) value(s string) (any, error) {
	switch f.Type {
	case "integer":
		return strconv.ParseInt(s, 10, 64)
	case "number":
		return strconv.ParseFloat(s, 64)
	case "boolean":
		switch strings.ToLower(s) {
		case "y", "yes", "true":
			return true, nil
		case "n", "no", "false":
			return false, nil
		}
		return nil, fmt.Errorf("%q: answer yes or no", s)
	case "array":
		var items []any
		for _, it := range strings.Split(s, ",") {
			items = append(items, strings.TrimSpace(it))
		}
		return items, nil
	}
	return s, nil
}

// elicitation shows a form and, with a terminal, asks it property by
// property and sends the answer (the daemon checks it against the form;
// a refusal asks again). Without one it says how to answer from elsewhere.
func (p *printer) elicitation(runID string, req apitype.ElicitationRequest) {
	out := p.out
	if p.json {
		out = io.Discard
		if p.in != nil {
			out = os.Stderr
		}
	}
	pending := true
	if r, err := p.c.Run(p.ctx, runID); err == nil {
		pending = slices.ContainsFunc(r.PendingElicitations, func(q apitype.ElicitationRequest) bool { return q.ID == req.ID })
	}
	var form struct {
		Properties map[string]formField `json:"properties"`
		Required   []string             `json:"required"`
	}
	_ = json.Unmarshal(req.Schema, &form)
	names := make([]string, 0, len(form.Properties))
	for name := range form.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(out, "\nthe agent asks: %s\n", req.Message)
	if !pending {
		return
	}
	if p.in == nil {
		fmt.Fprintf(out, "answer with: POST /v1/runs/%s/elicitations/%s (cancelled at %s without an answer)\n", runID, req.ID, req.ExpiresAt.Local().Format(time.Kitchen))
		return
	}
	for {
		ans, ok := p.fill(out, form.Properties, form.Required, names)
		if !ok {
			fmt.Fprintf(out, "\nno answer read; answer with: POST /v1/runs/%s/elicitations/%s\n", runID, req.ID)
			return
		}
		ans.AnsweredBy = p.as
		err := p.c.AnswerElicitation(p.ctx, runID, req.ID, ans)
		if err == nil {
			return
		}
		fmt.Fprintln(out, err)
		if !strings.Contains(err.Error(), apitype.CodeInvalidContent) {
			return // answered elsewhere, or not ours to answer: the stream says how
		}
	}
}

// fill asks accept, decline or cancel, then each property of an accept;
// ok is false when the input ended.
func (p *printer) fill(out io.Writer, props map[string]formField, required, names []string) (apitype.ElicitationAnswer, bool) {
	for {
		action, ok := p.line(out, "fill it in (yes), decline or cancel: ")
		if !ok {
			return apitype.ElicitationAnswer{}, false
		}
		switch strings.ToLower(action) {
		case "decline":
			return apitype.ElicitationAnswer{Action: apitype.ElicitDecline}, true
		case "cancel":
			return apitype.ElicitationAnswer{Action: apitype.ElicitCancel}, true
		case "y", "yes", "":
		default:
			continue
		}
		content := map[string]any{}
		for _, name := range names {
			v, ok := p.field(out, name, props[name], slices.Contains(required, name))
			if !ok {
				return apitype.ElicitationAnswer{}, false
			}
			if v != nil {
				content[name] = v
			}
		}
		return apitype.ElicitationAnswer{Action: apitype.ElicitAccept, Content: content}, true
	}
}

// field asks one property until it reads a value of its type (nil: left
// empty, for a property not required).
func (p *printer) field(out io.Writer, name string, f formField, required bool) (any, bool) {
	label := name
	if f.Title != "" {
		label += " (" + f.Title + ")"
	}
	label += " [" + f.Type
	if c := f.choices(); len(c) > 0 {
		label += ": " + strings.Join(c, "|")
	}
	if required {
		label += ", required"
	}
	label += "]: "
	for {
		s, ok := p.line(out, label)
		if !ok {
			return nil, false
		}
		if s == "" && !required {
			return nil, true
		}
		if s == "" {
			continue
		}
		v, err := f.value(s)
		if err != nil {
			fmt.Fprintln(out, err)
			continue
		}
		return v, true
	}
}

// line prompts and reads one trimmed line; ok is false at the input's end.
func (p *printer) line(out io.Writer, prompt string) (string, bool) {
	fmt.Fprint(out, prompt)
	s, err := p.in.ReadString('\n')
	if err != nil && s == "" {
		return "", false
	}
	return strings.TrimSpace(s), true
}
