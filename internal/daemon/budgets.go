// Daily budgets: the book that counts them, what a turn's cost does to
// them, and how clients see them.

package daemon

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/budget"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/store"
)

// newBook builds the budget book over the store's persisted spending.
func newBook(c config.Budgets, now func() time.Time, st *store.Store) (*budget.Book, error) {
	bc, err := bookConfig(c)
	if err != nil {
		return nil, err
	}
	return budget.New(bc, now, func(day time.Time) (map[budget.Key]apitype.Amount, error) {
		spent, err := st.SpentOn(day)
		if err != nil {
			return nil, err
		}
		out := make(map[budget.Key]apitype.Amount, len(spent))
		for k, v := range spent {
			out[budget.Key{Scope: k.Scope, ID: k.ID}] = v
		}
		return out, nil
	}), nil
}

// bookConfig is the budgets as the book counts them.
func bookConfig(c config.Budgets) (budget.Config, error) {
	loc, err := c.Location()
	if err != nil {
		return budget.Config{}, fmt.Errorf("budgets: timezone %q: %w", c.Timezone, err)
	}
	reset, err := c.ResetOffset()
	if err != nil {
		return budget.Config{}, fmt.Errorf("budgets: %w", err)
	}
	return budget.Config{
		Currency: c.Currency, Location: loc, Reset: reset, WarnAt: c.WarnAt,
		Bindings: amounts(c.Bindings), Channels: amounts(c.Channels), ChannelDefault: apitype.AmountOf(c.ChannelDefault),
	}, nil
}

// amounts are config limits as exact amounts (to the micro-unit).
func amounts(m map[string]float64) map[string]apitype.Amount {
	out := make(map[string]apitype.Amount, len(m))
	for k, v := range m {
		out[k] = apitype.AmountOf(v)
	}
	return out
}

// warnOnce runs warn the first time the daemon meets what names.
func (d *Daemon) warnOnce(what string, warn func()) {
	d.mu.Lock()
	first := !d.warned[what]
	d.warned[what] = true
	d.mu.Unlock()
	if first {
		warn()
	}
}

// checkBudget refuses a turn whose binding or channel spent its daily
// budget.
func (d *Daemon) checkBudget(binding, channel string) error {
	err := d.book.Check(binding, channel)
	var ex *budget.ExceededError
	if errors.As(err, &ex) {
		d.m.BudgetRefused(ex.Key.Scope)
	}
	return err
}

// chargeBudgets counts a turn's cost toward its budgets, reports every
// level it crossed on the run (a budget event), in the log and in metrics,
// and returns the spending for the caller to persist with the turn.
func (d *Daemon) chargeBudgets(r *run.Run, b config.Binding, channel string, u apitype.Usage, log *zap.Logger) []store.Spend {
	if u.Cost == nil || !d.book.Applies(b.ID, channel) {
		return nil
	}
	charges, crossed, counted, err := d.book.Add(b.ID, channel, *u.Cost, u.Currency)
	if err != nil {
		log.Error("counting the turn's cost toward its budgets failed", zap.Error(err))
		return nil
	}
	if !counted {
		d.warnOnce("currency:"+b.ID, func() {
			log.Warn("turn costs are in another currency than the budgets; they are not counted", zap.String("currency", u.Currency), zap.String("budget_currency", d.book.Currency()))
		})
		return nil
	}
	for _, c := range crossed {
		ev := apitype.Budget{Scope: c.Key.Scope, ID: c.Key.ID, Level: c.Level, Spent: c.Spent, Limit: c.Limit, Currency: d.book.Currency(), ResetsAt: c.ResetsAt}
		r.Emit(apitype.Event{Event: apitype.EventBudget, Budget: &ev})
		d.m.BudgetCrossed(c.Key.Scope, c.Level)
		msg := "daily budget at its warning share"
		if c.Level == budget.LevelExceeded {
			msg = "daily budget spent: new turns are refused until it resets"
		}
		log.Warn(msg, zap.String("scope", c.Key.Scope), zap.String("id", c.Key.ID), zap.Stringer("spent", c.Spent), zap.Stringer("limit", c.Limit), zap.Time("resets_at", c.ResetsAt))
	}
	out := make([]store.Spend, len(charges))
	for i, c := range charges {
		out[i] = store.Spend{Day: c.Day, Scope: c.Key.Scope, ID: c.Key.ID, Cost: c.Cost}
	}
	return out
}

// Budgets lists the day's budgets with what they have spent.
func (d *Daemon) Budgets() (apitype.Budgets, error) {
	states, err := d.book.States()
	if err != nil {
		return apitype.Budgets{}, err
	}
	day, resets := d.book.Day(d.now())
	out := apitype.Budgets{Day: day.Format(time.DateOnly), ResetsAt: resets, Currency: d.book.Currency(), Budgets: []apitype.Budget{}}
	for _, s := range states {
		out.Budgets = append(out.Budgets, apitype.Budget{Scope: s.Key.Scope, ID: s.Key.ID, Level: s.Level, Spent: s.Spent, Limit: s.Limit, Currency: d.book.Currency(), ResetsAt: s.ResetsAt})
	}
	return out, nil
}

// budgetGauges reads the book at scrape time.
type budgetGauges struct{ b *budget.Book }

func (g budgetGauges) BudgetStates() []metrics.BudgetState {
	states, err := g.b.States()
	if err != nil {
		return nil
	}
	// Channels under the default limit come and go with the day's
	// traffic: only configured budgets get series.
	var out []metrics.BudgetState
	for _, s := range states {
		if !s.Default {
			out = append(out, metrics.BudgetState{Scope: s.Key.Scope, ID: s.Key.ID, Spent: s.Spent.Float(), Limit: s.Limit.Float()})
		}
	}
	return out
}
