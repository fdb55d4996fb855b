package api

import (
	"context"
	"slices"
	"testing"

	"github.com/residentd/residentd/apitype"
)

// The health response carries the daemon's listeners, a failed one with
// its error (the schema check sees this response too).
func TestHealthListeners(t *testing.T) {
	e := newEnv(t)
	h, err := e.c.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h.Listeners != nil {
		t.Errorf("listeners %+v without a Listeners option", h.Listeners)
	}
	want := []apitype.Listener{
		{Name: "api", Addr: e.sock},
		{Name: "metrics", Addr: "127.0.0.1:9464", Error: "listen tcp 127.0.0.1:9464: bind: address already in use"},
	}
	e.srv.listeners = func() []apitype.Listener { return want }
	if h, err = e.c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.Listeners, want) {
		t.Errorf("listeners %+v, want %+v", h.Listeners, want)
	}
}
