package daemon

import (
	"time"

	"github.com/residentd/residentd/internal/pool"
)

// What the daemon's external tests may see of its insides.

// PoolSessions is the pool's view of the live processes.
func (d *Daemon) PoolSessions() []pool.Info { return d.pool.Sessions() }

// SetClock swaps the daemon's clock (the keeper reads it too); call it
// before the turns it should time.
func (d *Daemon) SetClock(now func() time.Time) { d.now = now }

// DecodeEvent decodes one line of a run's log.
var DecodeEvent = decodeEvent

// ErrFresh is the cause of a turn cancelled by start fresh.
var ErrFresh = errFresh

// ReapIdle runs the pool's idle reaper once.
func (d *Daemon) ReapIdle() int { return d.pool.ReapIdle() }
