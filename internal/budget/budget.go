// Package budget owns the daily spending limits per binding and per
// channel: what the current budget day has cost, when it resets, whether a
// turn may start, and when a turn's cost crosses a limit's warning share or
// the limit itself.
package budget

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/residentd/residentd/apitype"
)

// Scopes a limit applies to.
const (
	ScopeBinding = "binding"
	ScopeChannel = "channel"
)

// Levels of a crossing.
const (
	LevelWarning  = "warning"  // the day's spending reached the warning share of the limit
	LevelExceeded = "exceeded" // it reached the limit: new turns are refused until the reset
)

// ErrExceeded classifies a turn refused because a budget it counts toward
// is spent; the error is an *ExceededError.
var ErrExceeded = errors.New("daily budget exceeded")

// ExceededError says which budget refused a turn and until when.
type ExceededError struct {
	Key      Key
	Spent    apitype.Amount
	Limit    apitype.Amount
	Currency string
	ResetsAt time.Time
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("%v: %s spent %s %s of its daily budget of %s %s; new turns are accepted again at %s (or raise the limit under budgets in the config)",
		ErrExceeded, e.Key, e.Spent, e.Currency, e.Limit, e.Currency, e.ResetsAt.Format(time.RFC3339))
}

func (e *ExceededError) Unwrap() error { return ErrExceeded }

// Config is the limits and the budget day.
type Config struct {
	Currency string
	Location *time.Location // the day's time zone
	Reset    time.Duration  // how far into the calendar day a budget day starts
	WarnAt   float64        // share of a limit that warns, in (0, 1)
	// Bindings and Channels are daily limits by id; ChannelDefault applies
	// to every channel without its own (0: none).
	Bindings       map[string]apitype.Amount
	Channels       map[string]apitype.Amount
	ChannelDefault apitype.Amount
}

// Key names one budget.
type Key struct {
	Scope, ID string
}

func (k Key) String() string { return fmt.Sprintf("%s %q", k.Scope, k.ID) }

// Charge is cost counted toward one budget on one budget day, for the
// caller to persist.
type Charge struct {
	Day  time.Time // midnight (in the budget's zone) of the calendar date that names the day
	Key  Key
	Cost apitype.Amount
}

// Crossing is a budget whose day's spending passed a level with one turn.
type Crossing struct {
	Key      Key
	Level    string // LevelWarning or LevelExceeded
	Spent    apitype.Amount
	Limit    apitype.Amount
	ResetsAt time.Time
}

// State is one budget as a client lists it.
type State struct {
	Key      Key
	Limit    apitype.Amount
	Spent    apitype.Amount
	Level    string // "ok", LevelWarning or LevelExceeded
	ResetsAt time.Time
	// Default: a channel under channel_default, listed because it spent
	// something today.
	Default bool
}

// Load returns the persisted totals of the budget day named by day.
type Load func(day time.Time) (map[Key]apitype.Amount, error)

// Book keeps the current day's spending. Create it with New; it needs no
// stopping.
type Book struct {
	cfg  atomic.Pointer[Config] // immutable once stored; SetConfig swaps it
	now  func() time.Time
	load Load

	mu    sync.Mutex // guards day and spent
	day   time.Time  // the budget day spent counts; zero before the first use
	spent map[Key]apitype.Amount
}

// New returns a book over cfg; now is its clock and load reads a day's
// persisted totals when the book moves to that day.
func New(cfg Config, now func() time.Time, load Load) *Book {
	if cfg.Location == nil {
		cfg.Location = time.Local
	}
	b := &Book{now: now, load: load, spent: map[Key]apitype.Amount{}}
	b.cfg.Store(&cfg)
	return b
}

// SetConfig puts new limits in force at once (a config reload); what the
// day counted so far stays counted toward them (a budget that had no limit
// counted nothing).
func (b *Book) SetConfig(cfg Config) {
	if cfg.Location == nil {
		cfg.Location = time.Local
	}
	b.cfg.Store(&cfg)
}

func (b *Book) conf() *Config { return b.cfg.Load() }

// Enabled reports whether any limit is configured.
func (b *Book) Enabled() bool {
	return len(b.conf().Bindings) > 0 || len(b.conf().Channels) > 0 || b.conf().ChannelDefault > 0
}

// Currency is the currency limits are in.
func (b *Book) Currency() string { return b.conf().Currency }

// limit returns k's daily limit, 0 for none.
func (b *Book) limit(k Key) apitype.Amount {
	switch k.Scope {
	case ScopeBinding:
		return b.conf().Bindings[k.ID]
	case ScopeChannel:
		if v, ok := b.conf().Channels[k.ID]; ok {
			return v
		}
		return b.conf().ChannelDefault
	}
	return 0
}

// keys are the budgets a turn of binding in channel counts toward.
func (b *Book) keys(binding, channel string) []Key {
	var out []Key
	for _, k := range []Key{{ScopeBinding, binding}, {ScopeChannel, channel}} {
		if b.limit(k) > 0 {
			out = append(out, k)
		}
	}
	return out
}

// Applies reports whether a turn of binding in channel counts toward any
// budget.
func (b *Book) Applies(binding, channel string) bool { return len(b.keys(binding, channel)) > 0 }

// Day returns the budget day t falls in, named by its calendar date
// (midnight of that date in the budget's zone), and when that day ends.
// A day starts at Reset past midnight, by the wall clock: on a day the
// clocks change it is an hour shorter or longer.
func (b *Book) Day(t time.Time) (day, resets time.Time) {
	loc := b.conf().Location
	l := t.In(loc)
	y, m, d := l.Date()
	if l.Before(b.start(y, m, d)) {
		y, m, d = time.Date(y, m, d-1, 0, 0, 0, 0, loc).Date()
	}
	return time.Date(y, m, d, 0, 0, 0, 0, loc), b.start(y, m, d+1)
}

// start is when the budget day named by a date begins.
func (b *Book) start(y int, m time.Month, d int) time.Time {
	h, min := int(b.conf().Reset/time.Hour), int(b.conf().Reset%time.Hour/time.Minute)
	return time.Date(y, m, d, h, min, 0, 0, b.conf().Location)
}

// roll moves the book to the day now falls in, reading its persisted
// totals; b.mu is held.
func (b *Book) roll(now time.Time) (resets time.Time, err error) {
	day, resets := b.Day(now)
	if day.Equal(b.day) {
		return resets, nil
	}
	spent, err := b.load(day)
	if err != nil {
		return resets, fmt.Errorf("budget: read the spending of %s: %w", day.Format(time.DateOnly), err)
	}
	if spent == nil {
		spent = map[Key]apitype.Amount{}
	}
	b.day, b.spent = day, spent
	return resets, nil
}

// Check refuses a turn of binding in channel when a budget it counts
// toward is spent for the day; the error wraps ErrExceeded and says when
// the budget resets.
func (b *Book) Check(binding, channel string) error {
	keys := b.keys(binding, channel)
	if len(keys) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	resets, err := b.roll(b.now())
	if err != nil {
		return err
	}
	for _, k := range keys {
		if lim, spent := b.limit(k), b.spent[k]; spent >= lim {
			return &ExceededError{Key: k, Spent: spent, Limit: lim, Currency: b.conf().Currency, ResetsAt: resets}
		}
	}
	return nil
}

// Add counts cost (in currency) toward the budgets of a turn of binding in
// channel, and returns what the caller persists and the levels the cost
// crossed. Cost in another currency than the limits' is not counted:
// counted reports that.
func (b *Book) Add(binding, channel string, cost apitype.Amount, currency string) (charges []Charge, crossed []Crossing, counted bool, err error) {
	keys := b.keys(binding, channel)
	if len(keys) == 0 || cost <= 0 {
		return nil, nil, true, nil
	}
	if currency != "" && currency != b.conf().Currency {
		return nil, nil, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	resets, err := b.roll(b.now())
	if err != nil {
		return nil, nil, true, err
	}
	for _, k := range keys {
		lim := b.limit(k)
		before := b.spent[k]
		after := before + cost
		b.spent[k] = after
		charges = append(charges, Charge{Day: b.day, Key: k, Cost: cost})
		for _, lv := range []struct {
			name string
			at   apitype.Amount
		}{{LevelWarning, warnAt(b.conf().WarnAt, lim)}, {LevelExceeded, lim}} {
			if at := lv.at; before < at && after >= at {
				crossed = append(crossed, Crossing{Key: k, Level: lv.name, Spent: after, Limit: lim, ResetsAt: resets})
			}
		}
	}
	return charges, crossed, true, nil
}

// States lists every configured budget with the day's spending, and the
// channels under the default limit that spent anything today, by scope
// and id.
func (b *Book) States() ([]State, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	resets, err := b.roll(b.now())
	if err != nil {
		return nil, err
	}
	seen := map[Key]bool{}
	var out []State
	add := func(k Key) {
		if seen[k] {
			return
		}
		seen[k] = true
		lim, spent := b.limit(k), b.spent[k]
		if lim <= 0 {
			return
		}
		level := "ok"
		switch {
		case spent >= lim:
			level = LevelExceeded
		case spent >= warnAt(b.conf().WarnAt, lim):
			level = LevelWarning
		}
		_, own := b.conf().Channels[k.ID]
		def := k.Scope == ScopeChannel && !own
		out = append(out, State{Key: k, Limit: lim, Spent: spent, Level: level, ResetsAt: resets, Default: def})
	}
	for id := range b.conf().Bindings {
		add(Key{ScopeBinding, id})
	}
	for id := range b.conf().Channels {
		add(Key{ScopeChannel, id})
	}
	for k := range b.spent {
		add(k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key.Scope != out[j].Key.Scope {
			return out[i].Key.Scope < out[j].Key.Scope
		}
		return out[i].Key.ID < out[j].Key.ID
	})
	return out, nil
}

// warnAt is the spending at which a limit warns: share of it, to the
// nearest micro-unit.
func warnAt(share float64, lim apitype.Amount) apitype.Amount {
	return apitype.Amount(math.Round(share * float64(lim)))
}
