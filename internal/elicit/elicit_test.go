package elicit

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const form = `{"type":"object","properties":{
 "env":{"type":"string","enum":["staging","production"]},
 "pick":{"type":"string","oneOf":[{"const":"a","title":"A"},{"const":"b","title":"B"}]},
 "reason":{"type":"string","minLength":3,"maxLength":10},
 "mail":{"type":"string","format":"email"},
 "replicas":{"type":"integer","minimum":1,"maximum":5},
 "ratio":{"type":"number","maximum":1},
 "confirm":{"type":"boolean"},
 "tags":{"type":"array","items":{"anyOf":[{"const":"x","title":"X"},{"const":"y","title":"Y"}]}}},
 "required":["env","confirm"]}`

func content(t *testing.T, s string) map[string]any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCheck(t *testing.T) {
	s, err := Parse(json.RawMessage(form))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		content string
		bad     string // a part of the error, "" for none
	}{
		{`{"env":"staging","confirm":true}`, ""},
		{`{"env":"staging","confirm":false,"pick":"b","reason":"abcd","mail":"a@b.example","replicas":3,"ratio":0.5,"tags":["x","y"]}`, ""},
		{`{"confirm":true}`, `"env" is missing`},
		{`{"env":"dev","confirm":true}`, `not one of`},
		{`{"env":"staging","confirm":"yes"}`, `want a boolean`},
		{`{"env":"staging","confirm":true,"pick":"c"}`, `not one of`},
		{`{"env":"staging","confirm":true,"reason":"ab"}`, `shorter than 3`},
		{`{"env":"staging","confirm":true,"mail":"nope"}`, `not a email`},
		{`{"env":"staging","confirm":true,"replicas":2.5}`, `want an integer`},
		{`{"env":"staging","confirm":true,"replicas":9}`, `above the maximum`},
		{`{"env":"staging","confirm":true,"tags":["z"]}`, `not one of`},
		{`{"env":"staging","confirm":true,"extra":1}`, `not in the form`},
	} {
		err := s.Check(content(t, tc.content))
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: %v", tc.content, err)
		case tc.bad != "" && (err == nil || !errors.Is(err, ErrBadContent) || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: got %v, want an error with %q", tc.content, err, tc.bad)
		}
	}
}

func TestParseRefusesWhatIsNotFlat(t *testing.T) {
	for _, raw := range []string{
		``,
		`{"type":"array"}`,
		`{"properties":{"o":{"type":"object"}}}`,
		`{"properties":{"a":{"type":"array","items":{}}}}`,
		`{"properties":{"s":{"type":"string","format":"ipv4"}}}`,
		`{"properties":{},"required":["x"]}`,
	} {
		if _, err := Parse(json.RawMessage(raw)); !errors.Is(err, ErrBadSchema) {
			t.Errorf("%s: got %v, want ErrBadSchema", raw, err)
		}
	}
}
