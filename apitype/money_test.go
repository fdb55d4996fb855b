package apitype

import (
	"encoding/json"
	"testing"
)

func TestAmountExact(t *testing.T) {
	var sum Amount
	for range 3 {
		sum += AmountOf(0.4)
	}
	if got := sum.String(); got != "1.2" {
		t.Fatalf("three times 0.4 = %s, want 1.2", got)
	}
	for _, tt := range []struct {
		a    Amount
		text string
	}{{0, "0"}, {1, "0.000001"}, {20 * AmountScale, "20"}, {-400000, "-0.4"}, {125, "0.000125"}, {1234567890123, "1234567.890123"}} {
		if got := tt.a.String(); got != tt.text {
			t.Errorf("%d: %q, want %q", int64(tt.a), got, tt.text)
		}
		back, err := ParseAmount(tt.text)
		if err != nil || back != tt.a {
			t.Errorf("parse %q: %d, %v", tt.text, back, err)
		}
		b, _ := json.Marshal(tt.a)
		var j Amount
		if err := json.Unmarshal(b, &j); err != nil || j != tt.a || string(b) != `"`+tt.text+`"` {
			t.Errorf("json %s: %d, %v", b, j, err)
		}
	}
	for _, bad := range []string{"", "1.", ".5", "1e3", "1.0000001", "--1", "1,5", "0x10", "NaN"} {
		if _, err := ParseAmount(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if err := json.Unmarshal([]byte(`1.2`), new(Amount)); err == nil {
		t.Error("a JSON number was taken as an amount")
	}
}
