package child

import (
	"io"
	"sync"
)

// ring keeps the last size bytes written to it: the agent's stderr tail,
// bounded so a flooding agent cannot grow the daemon's memory.
type ring struct {
	mu   sync.Mutex
	size int
	buf  []byte
}

func newRing(size int) *ring { return &ring{size: size} }

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	if len(p) >= r.size {
		p = p[len(p)-r.size:]
		r.buf = append(r.buf[:0], p...)
		return n, nil
	}
	if over := len(r.buf) + len(p) - r.size; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	r.buf = append(r.buf, p...)
	return n, nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.buf)
}

// readFrom copies src into the ring until EOF or a read error (closed pipe).
func (r *ring) readFrom(src io.Reader) {
	_, _ = io.Copy(r, src)
}
