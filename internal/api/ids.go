package api

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/residentd/residentd/apitype"
)

// errInvalidID classifies an id the API refuses (400 invalid_id).
var errInvalidID = errors.New("invalid id")

// checkID refuses an id longer than apitype.MaxIDBytes, not UTF-8, or
// holding a control character; where names it ("field \"run_id\"", "path
// parameter \"run\""). An empty id passes: whether one is required is the
// caller's rule. Ids end up in the store's keys, in log lines and in
// prompts, so a bound here keeps each of those bounded.
func checkID(where, id string) error {
	if len(id) > apitype.MaxIDBytes {
		return fmt.Errorf("%w: %s is %d bytes; an id is at most %d bytes", errInvalidID, where, len(id), apitype.MaxIDBytes)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: %s is not valid UTF-8", errInvalidID, where)
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s holds the control character %U at byte %d; an id is printable text", errInvalidID, where, r, i)
		}
	}
	return nil
}

// idField is a named id for checkIDs. Where it is ("field \"run_id\"")
// is worded only for a refusal: every request checks several.
type idField struct{ kind, name, id string }

func field(name, id string) idField { return idField{"field", name, id} }

func inPath(name, id string) idField { return idField{"path parameter", name, id} }

func inQuery(name, id string) idField { return idField{"query parameter", name, id} }

func (f idField) where() string { return f.kind + " " + strconv.Quote(f.name) }

// checkIDs checks ids in order and returns the first refusal.
func checkIDs(ids ...idField) error {
	for _, f := range ids {
		if len(f.id) <= apitype.MaxIDBytes && plainID(f.id) {
			continue
		}
		if err := checkID(f.where(), f.id); err != nil {
			return err
		}
	}
	return nil
}

// plainID: id is printable ASCII, which checkID passes without wording
// where it is.
func plainID(id string) bool {
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}
