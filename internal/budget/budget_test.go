package budget

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone %s not on this machine: %v", name, err)
	}
	return loc
}

func TestDay(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	tests := []struct {
		name        string
		loc         *time.Location
		offset      time.Duration
		at          time.Time
		day, resets string // in the zone
	}{
		{"midnight utc, noon", time.UTC, 0, time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), "2026-12-03", "2026-12-04T00:00:00Z"},
		{"midnight utc, at the reset", time.UTC, 0, time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), "2026-12-04", "2026-12-05T00:00:00Z"},
		{"midnight utc, a nanosecond before", time.UTC, 0, time.Date(2026, 12, 3, 23, 59, 59, 999999999, time.UTC), "2026-12-03", "2026-12-04T00:00:00Z"},
		{"06:30 reset, before it", time.UTC, 6*time.Hour + 30*time.Minute, time.Date(2026, 12, 3, 6, 29, 0, 0, time.UTC), "2026-12-02", "2026-12-03T06:30:00Z"},
		{"06:30 reset, after it", time.UTC, 6*time.Hour + 30*time.Minute, time.Date(2026, 12, 3, 6, 30, 0, 0, time.UTC), "2026-12-03", "2026-12-04T06:30:00Z"},
		{"berlin midnight seen in utc", berlin, 0, time.Date(2026, 12, 3, 23, 30, 0, 0, time.UTC), "2026-12-04", "2026-12-05T00:00:00+01:00"},
		{"berlin, the night clocks go forward", berlin, 0, time.Date(2026, 3, 29, 12, 0, 0, 0, berlin), "2026-03-29", "2026-03-30T00:00:00+02:00"},
		{"month end", time.UTC, 0, time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC), "2026-12-31", "2027-01-01T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Config{Location: tt.loc, Reset: tt.offset}, nil, nil)
			day, resets := b.Day(tt.at)
			if got := day.Format(time.DateOnly); got != tt.day {
				t.Errorf("day = %s, want %s", got, tt.day)
			}
			if day.Hour() != 0 || day.Minute() != 0 || day.Location() != tt.loc {
				t.Errorf("day %v is not midnight in %v", day, tt.loc)
			}
			if got := resets.Format(time.RFC3339); got != tt.resets {
				t.Errorf("resets = %s, want %s", got, tt.resets)
			}
		})
	}
}

func day(b *Book, t time.Time) time.Time {
	d, _ := b.Day(t)
	return d
}

// clock is an injected clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestWarnExceedAndReset: one turn's cost crosses 80%, the next the limit
// (each reported once), a spent budget refuses turns of its binding or
// channel but not others, and the next budget day starts from zero.
func TestWarnExceedAndReset(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	persisted := map[string]map[Key]apitype.Amount{}
	b := New(Config{Currency: "USD", Location: time.UTC, WarnAt: 0.8,
		Bindings: map[string]apitype.Amount{"b-claude": usd(1.0)}, ChannelDefault: usd(10)},
		c.now, func(day time.Time) (map[Key]apitype.Amount, error) { return persisted[day.Format(time.DateOnly)], nil })

	add := func(cost float64) []Crossing {
		t.Helper()
		charges, crossed, counted, err := b.Add("b-claude", "ch", usd(cost), "USD")
		if err != nil || !counted {
			t.Fatalf("add %g: counted %v err %v", cost, counted, err)
		}
		if len(charges) != 2 || charges[0].Key != (Key{ScopeBinding, "b-claude"}) || charges[1].Key != (Key{ScopeChannel, "ch"}) || !charges[0].Day.Equal(day(b, c.t)) {
			t.Fatalf("charges %+v", charges)
		}
		return crossed
	}
	if got := add(0.5); len(got) != 0 {
		t.Fatalf("50%%: crossings %+v", got)
	}
	if err := b.Check("b-claude", "ch"); err != nil {
		t.Fatalf("check at 50%%: %v", err)
	}
	// Binary fractions, so the sums are exact.
	got := add(0.375)
	if len(got) != 1 || got[0].Level != LevelWarning || got[0].Key.Scope != ScopeBinding || got[0].Spent != usd(0.875) || got[0].Limit != usd(1) {
		t.Fatalf("87.5%%: crossings %+v, want one binding warning", got)
	}
	if got := add(0.0625); len(got) != 0 {
		t.Fatalf("93.75%%: the warning came again: %+v", got)
	}
	got = add(0.125)
	if len(got) != 1 || got[0].Level != LevelExceeded || got[0].ResetsAt != time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC) {
		t.Fatalf("106.25%%: crossings %+v, want exceeded, resetting at midnight", got)
	}
	err := b.Check("b-claude", "other")
	if !errors.Is(err, ErrExceeded) || !strings.Contains(err.Error(), `binding "b-claude"`) || !strings.Contains(err.Error(), "2026-12-04T00:00:00Z") {
		t.Fatalf("check over the limit: %v", err)
	}
	if err := b.Check("b-other", "ch"); err != nil {
		t.Fatalf("another binding in the same channel: %v", err)
	}
	states, err := b.States()
	if err != nil || len(states) != 2 || states[0].Level != LevelExceeded || states[1].Key != (Key{ScopeChannel, "ch"}) || states[1].Level != "ok" {
		t.Fatalf("states %+v %v", states, err)
	}

	// Another currency is not counted.
	if _, _, counted, _ := b.Add("b-claude", "ch", usd(5), "EUR"); counted {
		t.Fatal("EUR cost counted toward USD budgets")
	}

	// The reset: a minute after midnight the binding may run again, and a
	// day read back from the store counts from what was persisted.
	c.t = time.Date(2026, 12, 4, 0, 1, 0, 0, time.UTC)
	if err := b.Check("b-claude", "ch"); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	persisted["2026-12-05"] = map[Key]apitype.Amount{{ScopeBinding, "b-claude"}: usd(0.875)}
	c.t = time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	got = add(0.25)
	if len(got) != 1 || got[0].Level != LevelExceeded || got[0].Spent != usd(1.125) {
		t.Fatalf("on a day with persisted spending: %+v", got)
	}
}

var usd = apitype.AmountOf

// TestExactSpending: ten turns of 0.1 against a limit of 1 reach it exactly
// at the tenth (binary floats sum them to 0.9999999999999999), and three
// of 0.4 spend exactly 1.2.
func TestExactSpending(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	b := New(Config{Currency: "USD", Location: time.UTC, WarnAt: 0.8, Bindings: map[string]apitype.Amount{"b": usd(1), "b12": usd(100)}},
		c.now, func(time.Time) (map[Key]apitype.Amount, error) { return nil, nil })
	for i := 1; i <= 10; i++ {
		_, crossed, _, err := b.Add("b", "ch", usd(0.1), "USD")
		if err != nil {
			t.Fatal(err)
		}
		exceeded := len(crossed) > 0 && crossed[len(crossed)-1].Level == LevelExceeded
		if exceeded != (i == 10) {
			t.Fatalf("turn %d of 0.1 against 1: crossings %+v", i, crossed)
		}
	}
	if err := b.Check("b", "ch"); !errors.Is(err, ErrExceeded) || !strings.Contains(err.Error(), "spent 1 USD of its daily budget of 1 USD") {
		t.Fatalf("check at exactly the limit: %v", err)
	}
	for range 3 {
		b.Add("b12", "ch", usd(0.4), "USD")
	}
	states, _ := b.States()
	for _, s := range states {
		if s.Key.ID == "b12" && s.Spent.String() != "1.2" {
			t.Fatalf("three turns of 0.4: spent %s, want 1.2", s.Spent)
		}
	}
}

func TestNoBudgets(t *testing.T) {
	b := New(Config{Currency: "USD", WarnAt: 0.8}, time.Now, nil)
	if b.Enabled() || b.Applies("b", "c") || b.Check("b", "c") != nil {
		t.Fatal("a book without limits limits something")
	}
	if ch, cr, counted, err := b.Add("b", "c", usd(100), "USD"); ch != nil || cr != nil || !counted || err != nil {
		t.Fatalf("add without limits: %v %v %v %v", ch, cr, counted, err)
	}
}
