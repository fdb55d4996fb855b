// Config reload: the config file read again and put in force without a
// restart, binding by binding, keeping every warm process the change does
// not concern.

package daemon

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/budget"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/pool"
)

// Reload errors.
var (
	// ErrInvalidConfig: the file does not load or validate; the config in
	// force stays.
	ErrInvalidConfig = errors.New("config not reloaded")
	// ErrNoConfigFile: the daemon runs on the built-in default config.
	ErrNoConfigFile = errors.New("no config file to reload")
)

// Reload reads the config file again and puts it in force; reloads run one
// at a time. A file that does not load or validate is refused
// (ErrInvalidConfig, with the reason) and the config in force stays.
// Otherwise each binding is compared with the one in force: an unchanged
// one keeps its processes untouched; a changed one's live processes take
// what a session can take at their key's next turn, or are replaced there
// when a setting they were started with changed (config.BindingClasses);
// a removed one's idle processes stop now and its busy ones after their
// turn, and its new turns are refused with unknown_binding. Pool size,
// queue limits and budgets apply at once; settings that need a restart
// are reported and keep their running values. Turns accepted before the
// reload (running or queued) keep the binding they were accepted with.
func (d *Daemon) Reload() (apitype.ConfigReload, error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	log := d.log.Named("config")
	if d.load == nil {
		err := fmt.Errorf("%w: the daemon was started without a config file (the built-in binding only); restart it with --config FILE to bind agents from a file", ErrNoConfigFile)
		log.Warn("config not reloaded", zap.Error(err))
		return apitype.ConfigReload{}, err
	}
	n, err := d.load()
	var bc budget.Config
	if err == nil {
		bc, err = bookConfig(n.Budgets)
	}
	if err != nil {
		err = fmt.Errorf("%w from %s: %w; the config in force stays", ErrInvalidConfig, d.file, err)
		d.m.Reloaded(false, nil)
		log.Error("config reload refused", zap.String("file", d.file), zap.Error(err))
		return apitype.ConfigReload{}, err
	}
	old := d.conf()
	out, actions := d.reloadReport(old, n)

	// In force from here: new turns read the new bindings, new processes
	// start with them, and the pool's Retired hook sees the removed ones.
	c := config.InForce(old, n)
	d.keeper.SetConfig(c)
	d.cfg.Store(c)
	d.book.SetConfig(bc)
	d.m.InitBindings(c.BindingIDs())
	d.pool.SetLimits(pool.Limits{
		MaxLive: c.MaxLive, IdleTimeout: time.Duration(c.IdleTimeout), QueueLen: c.QueueLen,
		QueueTimeout: time.Duration(c.QueueTimeout), YieldAfter: c.YieldAfter, Residency: policyFor(c),
	})
	stopped := d.pool.Sweep()

	d.m.Reloaded(true, actions)
	fields := []zap.Field{zap.String("file", d.file), zap.Int("stopped", stopped), zap.Strings("restart_needed", out.Restart)}
	for _, b := range out.Bindings {
		fields = append(fields, zap.String("binding."+b.Binding, b.Action))
	}
	for _, s := range out.Settings {
		fields = append(fields, zap.String("setting."+s.Setting, s.Class))
	}
	log.Info("config reloaded", fields...)
	if len(out.Restart) > 0 {
		log.Warn("config reload: settings that take effect only at a restart changed; their running values stay", zap.Strings("settings", out.Restart))
	}
	return out, nil
}

// reloadReport compares config n with old, the one in force: what happens
// to each binding and setting, and each binding's action.
func (d *Daemon) reloadReport(old, n *config.Config) (apitype.ConfigReload, []string) {
	diff := config.Compare(old, n)
	live := map[string]int{}
	for _, s := range d.pool.Sessions() {
		live[s.Key.Binding]++
	}
	out := apitype.ConfigReload{File: d.file, Bindings: []apitype.BindingReload{}, Settings: []apitype.ReloadChange{}, Restart: []string{}}
	var actions []string
	for _, bd := range diff.Bindings {
		br := apitype.BindingReload{Binding: bd.ID, Action: apitype.ReloadUnchanged, Changes: []apitype.ReloadChange{}, Processes: live[bd.ID]}
		switch {
		case bd.Added:
			br.Action = apitype.ReloadAdded
		case bd.Removed:
			br.Action = apitype.ReloadRemoved
		default:
			ob, _ := old.Binding(bd.ID)
			nb, _ := n.Binding(bd.ID)
			rank := 0
			for _, c := range bd.Changes {
				if c.Setting == "permission" {
					c.Class = d.keeper.PermissionClass(bd.ID, ob, nb)
				}
				br.Changes = append(br.Changes, apitype.ReloadChange{Setting: c.Setting, Class: string(c.Class)})
				if r, a := actionOf(c.Class); r > rank {
					rank, br.Action = r, a
				}
			}
		}
		out.Bindings = append(out.Bindings, br)
		actions = append(actions, br.Action)
	}
	for _, c := range diff.Settings {
		out.Settings = append(out.Settings, apitype.ReloadChange{Setting: c.Setting, Class: string(c.Class)})
		if c.Class == config.Restart {
			out.Restart = append(out.Restart, c.Setting)
		}
	}
	return out, actions
}

// actionOf ranks a change class as a binding's action: the strongest
// change names what happens to the binding's processes.
func actionOf(c config.Class) (int, string) {
	switch c {
	case config.ReplaceProcess:
		return 3, apitype.ReloadReplaceProcess
	case config.NewSession:
		return 2, apitype.ReloadNewSession
	case config.NextTurn:
		return 1, apitype.ReloadAppliedNext
	}
	return 0, apitype.ReloadUnchanged
}
