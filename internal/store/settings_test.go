package store

import (
	"math"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/session"
)

func day(s string) time.Time {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return d
}

// TestSpendAddsPersistsAndPrunes: spending adds up per day, scope and id,
// in one transaction, survives a reopen, shares the turn's transaction in
// FinishTurn, and days older than SpendDays before the newest go.
func TestSpendAddsPersistsAndPrunes(t *testing.T) {
	s := openTest(t, Options{})
	d1 := day("2026-12-03")
	before := s.Commits()
	if err := s.AddSpend([]Spend{{Day: d1, Scope: "binding", ID: "b", Cost: apitype.AmountOf(0.25)}, {Day: d1, Scope: "channel", ID: "ch", Cost: apitype.AmountOf(0.25)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSpend([]Spend{{Day: d1, Scope: "binding", ID: "b", Cost: apitype.AmountOf(0.5)}}); err != nil {
		t.Fatal(err)
	}
	k := session.Key{Channel: "ch", Binding: "b"}
	if err := s.FinishTurn(k, Finish{Spend: []Spend{{Day: d1, Scope: "channel", ID: "ch", Cost: apitype.AmountOf(1)}}}); err != nil {
		t.Fatal(err)
	}
	if n := s.Commits() - before; n != 3 {
		t.Fatalf("%d commits for three writes, want 3", n)
	}
	s = reopen(t, s, Options{})
	got, err := s.SpentOn(d1)
	if err != nil || len(got) != 2 || got[SpendKey{"binding", "b"}].String() != "0.75" || got[SpendKey{"channel", "ch"}].String() != "1.25" {
		t.Fatalf("spent on %s: %v %v", d1.Format(time.DateOnly), got, err)
	}
	if got, _ := s.SpentOn(day("2026-12-04")); len(got) != 0 {
		t.Fatalf("spending leaked into the next day: %v", got)
	}
	if err := s.AddSpend([]Spend{{Day: d1.AddDate(0, 0, SpendDays), Scope: "binding", ID: "b", Cost: apitype.AmountOf(1)}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.SpentOn(d1); len(got) != 2 {
		t.Fatalf("a day exactly SpendDays old was dropped: %v", got)
	}
	if err := s.AddSpend([]Spend{{Day: d1.AddDate(0, 0, SpendDays+1), Scope: "binding", ID: "b", Cost: apitype.AmountOf(1)}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.SpentOn(d1); len(got) != 0 {
		t.Fatalf("a day older than SpendDays was kept: %v", got)
	}
	if err := s.AddSpend([]Spend{{Day: d1, Cost: apitype.AmountOf(1)}}); err == nil {
		t.Fatal("spending without a scope was accepted")
	}
}

func TestKeyOptions(t *testing.T) {
	s := openTest(t, Options{})
	a, b := session.Key{Channel: "ch", Binding: "b1"}, session.Key{Channel: "ch/2", Binding: "b2"}
	if err := s.SetKeyOptions(a, map[string]string{"model": "sonnet"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetKeyOptions(b, map[string]string{"mode": "plan", "effort": "high"}); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, Options{})
	all, err := s.KeyOptions()
	if err != nil || len(all) != 2 || all[a]["model"] != "sonnet" || all[b]["effort"] != "high" {
		t.Fatalf("key options %v %v", all, err)
	}
	if err := s.SetKeyOptions(a, nil); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.KeyOptions(); len(all) != 1 || all[a] != nil {
		t.Fatalf("after clearing %s: %v", a, all)
	}
	if err := s.SetKeyOptions(session.Key{Channel: "ch"}, map[string]string{"x": "y"}); err == nil {
		t.Fatal("options for a key without a binding were accepted")
	}
}

// A version-3 file keeps its data and gains the options and spend buckets.
func TestMigrationV4Settings(t *testing.T) {
	k := session.Key{Channel: "ch", Binding: "b"}
	s := openFrom(t, 3, func(tx *bolt.Tx) error { return setNativeID(tx, k, "n1") })
	if err := s.SetKeyOptions(k, map[string]string{"model": "sonnet"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSpend([]Spend{{Day: day("2026-12-03"), Scope: "binding", ID: "b", Cost: apitype.AmountOf(2)}}); err != nil {
		t.Fatal(err)
	}
	if v := versionOf(t, s.db); v != SchemaVersion {
		t.Fatalf("version = %d, want %d", v, SchemaVersion)
	}
	if n, _ := s.NativeID(k); n != "n1" {
		t.Fatalf("native id %q after the migration", n)
	}
}

// TestMigrationV6ExactSpend: a version-5 file's float totals become exact
// amounts, 1.2000000000000002 (three turns of 0.4) reading back as 1.2.
func TestMigrationV6ExactSpend(t *testing.T) {
	d1 := day("2026-12-03")
	drift := 0.4 + 0.4 + 0.4
	s := openFrom(t, 5, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSpend)
		if err := b.Put(joinKey(d1.Format(dayLayout), "binding", "b"), u64(math.Float64bits(drift))); err != nil {
			return err
		}
		return b.Put(joinKey(d1.Format(dayLayout), "channel", "ch"), u64(math.Float64bits(0.25)))
	})
	got, err := s.SpentOn(d1)
	if err != nil || got[SpendKey{"binding", "b"}].String() != "1.2" || got[SpendKey{"channel", "ch"}].String() != "0.25" {
		t.Fatalf("spending after the migration: %v %v (the float was %v)", got, err, drift)
	}
}
