package child

import "os/exec"

// Run starts cmd and waits for it, as cmd.Run does, keeping its pid from
// the orphan reaper (Subreaper) until cmd.Wait has reaped it: a short
// helper the daemon runs and waits for itself (git), which is no agent
// and no orphan. Its zombie is then cmd.Wait's, and at the subreaper's
// stop neither it nor what it started counts as adopted.
func Run(cmd *exec.Cmd) error {
	own.Lock()
	if err := cmd.Start(); err != nil {
		own.Unlock()
		return err
	}
	pid := cmd.Process.Pid
	own.helpers[pid] = true
	own.Unlock()
	err := cmd.Wait()
	own.Lock()
	delete(own.helpers, pid)
	own.Unlock()
	return err
}

// helper reports whether pid is a child Run waits for.
func helper(pid int) bool {
	own.Lock()
	defer own.Unlock()
	return own.helpers[pid]
}
