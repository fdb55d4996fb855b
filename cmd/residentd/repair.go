package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/store"
)

type repairFlags struct {
	config, state string
	check         bool
}

func (f *repairFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", os.Getenv("RESIDENTD_CONFIG"), "JSON config file whose state_dir holds the file (as for serve)")
	fs.StringVar(&f.state, "state", "", "state directory holding residentd.db (default $XDG_STATE_HOME/residentd)")
	fs.BoolVar(&f.check, "check", false, "only check the file and report; change nothing (exit 1 when it is damaged)")
}

// runRepair salvages a damaged state file: `residentd repair [FILE]`, the
// file defaulting to the one `serve` would open with the same --config and
// --state. --check only reports.
func runRepair(_ context.Context, e *cmdEnv, f *repairFlags) error {
	stdout := e.stdout
	if len(e.args) > 1 {
		return fmt.Errorf("%w: repair takes at most one file, got %d arguments (see residentd repair --help)", errUsage, len(e.args))
	}
	var path string
	if len(e.args) == 1 {
		path = e.args[0]
	}
	if path == "" {
		dir, err := stateDirFor(f.config, f.state)
		if err != nil {
			return err
		}
		path = filepath.Join(dir, "residentd.db")
	}
	if f.check {
		rep, err := store.Verify(path)
		if err != nil {
			return err
		}
		printFound(stdout, rep)
		if rep.Damaged() {
			return fmt.Errorf("%q: %w: run \"residentd repair %s\"", path, store.ErrDamaged, path)
		}
		return nil
	}
	rep, err := store.Repair(path, 0)
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("%w: %v", errLockedState, err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "repaired %s: %d records in %d buckets copied into a new file at that path\n", rep.Path, rep.Records, rep.Buckets)
	fmt.Fprintf(stdout, "the damaged file is kept as %s\n", rep.Kept)
	printFound(stdout, rep.Found)
	return nil
}

// stateDirFor resolves the state directory as serve does: --state, else
// the config's state_dir (--config, else the default config file), else
// the default.
func stateDirFor(configPath, state string) (string, error) {
	if state != "" {
		return state, nil
	}
	if configPath == "" {
		var err error
		if configPath, err = existingDefaultConfig(); err != nil {
			return "", err
		}
	}
	if configPath != "" {
		cfg, err := loadConfig(configPath, "residentd", defaultStateDir())
		if err != nil {
			return "", err
		}
		return cfg.StateDir, nil
	}
	return defaultStateDir(), nil
}

// printFound prints what a scan read and what it could not.
func printFound(w io.Writer, r *store.CheckReport) {
	fmt.Fprintf(w, "%s: %d bytes, %d pages of %d bytes, %d read; meta page %d (transaction %d)\n",
		r.Path, r.Size, r.Pages, r.PageSize, r.Read, r.Meta, r.TxID)
	for _, n := range r.MetaNotes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "BUCKET\tRECORDS\tBUCKETS\tLOST PAGES\tLOST RECORDS")
	for _, b := range r.Buckets {
		lost := fmt.Sprint(b.LostRecords)
		if b.LostUnknown > 0 {
			lost += fmt.Sprintf(" + unknown (%d pages)", b.LostUnknown)
		}
		name := b.Name
		if name == "" {
			name = "(root)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", name, b.Records, b.Buckets, b.LostPages, lost)
	}
	tw.Flush()
	for _, p := range r.Problems {
		recs := " (records unknown)"
		switch {
		case p.Kind == "file":
			recs = "" // the pages it lacks are listed on their own
		case p.Records >= 0:
			recs = fmt.Sprintf(" (%d records)", p.Records)
		}
		fmt.Fprintf(w, "lost: %s%s\n", p, recs)
	}
	if more := r.NProblems - len(r.Problems); more > 0 {
		fmt.Fprintf(w, "lost: %d more pages not listed\n", more)
	}
	if r.Orphans > 0 {
		why := "their bucket cannot be told"
		if freelistLost(r) {
			why += "; the freelist is lost too, so some may be free pages that held nothing current"
		}
		fmt.Fprintf(w, "lost: %d leaf pages with %d records that no intact page points to (%s)\n", r.Orphans, r.OrphanRecords, why)
	}
	if !r.Damaged() {
		fmt.Fprintln(w, "no damage found: nothing was lost")
	}
}

// freelistLost reports whether the scan could not read the freelist.
func freelistLost(r *store.CheckReport) bool {
	for _, p := range r.Problems {
		if p.Kind == "freelist" {
			return true
		}
	}
	return false
}

// storeDamage is residentd_store_damage_total, read from the store at
// scrape time.
func storeDamage(st *store.Store) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "residentd_store_damage_total",
		Help: "Reads and writes of the state file that failed on a page the store could not read (store_damaged); run residentd repair.",
	}, func() float64 { return float64(st.Damage()) })
}

// logChecked logs what Open's check of the state file found.
func logChecked(log *zap.Logger, c store.CheckReport) {
	log.Info("state file checked", zap.String("path", c.Path), zap.Int64("bytes", c.Size),
		zap.Int("pages_read", c.Read), zap.Duration("took", c.Took))
	for _, n := range c.MetaNotes {
		log.Warn("state file meta page damaged; opened from the other one", zap.String("path", c.Path), zap.String("note", n))
	}
}
