package config

import (
	"encoding/json"
	"testing"
)

func TestApprovers(t *testing.T) {
	for _, tc := range []struct {
		json          string
		bad           bool
		user, author  string
		allows        bool
		marshalsAgain string
	}{
		{json: `"any"`, user: "", allows: true, marshalsAgain: `"any"`},
		{json: `"author"`, user: "u-ana", author: "u-ana", allows: true, marshalsAgain: `"author"`},
		{json: `"author"`, user: "u-bo", author: "u-ana"},
		{json: `"author"`, user: "", author: ""},
		{json: `["u-bo","u-cy"]`, user: "u-cy", allows: true, marshalsAgain: `["u-bo","u-cy"]`},
		{json: `["u-bo"]`, user: "u-ana", author: "u-ana"},
		{json: `"everyone"`, bad: true},
		{json: `[]`, bad: true},
		{json: `3`, bad: true},
	} {
		var a Approvers
		err := json.Unmarshal([]byte(tc.json), &a)
		if (err != nil) != tc.bad {
			t.Errorf("%s: error %v, want bad %v", tc.json, err, tc.bad)
			continue
		}
		if tc.bad {
			continue
		}
		if got := a.Allows(tc.user, tc.author); got != tc.allows {
			t.Errorf("%s allows %q (author %q): %v, want %v", tc.json, tc.user, tc.author, got, tc.allows)
		}
		if out, _ := json.Marshal(a); tc.marshalsAgain != "" && string(out) != tc.marshalsAgain {
			t.Errorf("%s marshals as %s", tc.json, out)
		}
	}
}
