package apitype

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Amount is an exact amount of money in millionths of its currency's unit
// (micro-units: 1.2 USD is 1200000). Sums and comparisons are integer
// arithmetic, so three turns of 0.4 make exactly 1.2. On the wire it is a
// decimal string with up to six fraction digits and no trailing zeros
// ("1.2", "0.000125", "20"), so no client parses it into a binary float by
// accident; docs/API.md says why.
type Amount int64

// AmountScale is the number of micro-units in one unit.
const AmountScale = 1_000_000

// AmountOf converts a float from an outside source (an agent's report, a
// config value) to the nearest micro-unit.
func AmountOf(f float64) Amount {
	return Amount(math.Round(f * AmountScale))
}

// Float is a for display and shares only; never sum it.
func (a Amount) Float() float64 { return float64(a) / AmountScale }

// String is the decimal form: "1.2", "-0.4", "20", "0.000001".
func (a Amount) String() string {
	neg := a < 0
	u := uint64(a)
	if neg {
		u = uint64(-a)
	}
	s := strconv.FormatUint(u/AmountScale, 10)
	if frac := u % AmountScale; frac != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%06d", frac), "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

var errAmount = errors.New("not a decimal amount")

// ParseAmount reads a decimal amount such as "1.2" or "-0.000125"; more
// than six fraction digits, exponents and anything else are refused.
func ParseAmount(s string) (Amount, error) {
	t := s
	neg := strings.HasPrefix(t, "-")
	if neg {
		t = t[1:]
	}
	whole, frac, dot := strings.Cut(t, ".")
	if whole == "" || (dot && frac == "") || len(frac) > 6 || len(whole) > 12 || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("amount %q: %w (want digits with at most six after the point, such as 1.25)", s, errAmount)
	}
	w, _ := strconv.ParseInt(whole, 10, 64)
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	a := Amount(w*AmountScale + f)
	if neg {
		a = -a
	}
	return a, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// MarshalJSON writes the decimal string.
func (a Amount) MarshalJSON() ([]byte, error) { return []byte(`"` + a.String() + `"`), nil }

// UnmarshalJSON reads the decimal string.
func (a *Amount) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("amount %s: %w (want a decimal string such as \"1.25\")", b, errAmount)
	}
	v, err := ParseAmount(s)
	if err != nil {
		return err
	}
	*a = v
	return nil
}
