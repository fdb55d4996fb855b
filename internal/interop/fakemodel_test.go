package interop

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
)

// fakeModel is what every fake model endpoint shares: its server, the
// reply it gives, the requests it saw, and a switch that stalls its model
// calls (to cancel a turn while the model is busy).
type fakeModel struct {
	srv   *httptest.Server
	reply string

	mu    sync.Mutex
	reqs  []apiRequest
	stall chan struct{} // when set, model calls block until it is closed or the client goes away
	// stalled is signalled (non-blocking) each time a model call starts stalling.
	stalled chan struct{}
	// aborted is signalled (non-blocking) when a stalled call's client hangs up.
	aborted chan struct{}
}

func newFakeModel(reply string) fakeModel {
	return fakeModel{reply: reply, stalled: make(chan struct{}, 8), aborted: make(chan struct{}, 8)}
}

// record reads r's body and keeps the request; stall is the stall switch
// as it was (nil: not stalled).
func (f *fakeModel) record(r *http.Request) (body []byte, stall chan struct{}) {
	body, _ = io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, apiRequest{Method: r.Method, Path: r.URL.Path, Body: body})
	return body, f.stall
}

// wait blocks a model call while stall is set, until it is released
// (true) or the client hangs up (false).
func (f *fakeModel) wait(r *http.Request, stall chan struct{}) bool {
	if stall == nil {
		return true
	}
	select {
	case f.stalled <- struct{}{}:
	default:
	}
	select {
	case <-stall:
		return true
	case <-r.Context().Done():
		select {
		case f.aborted <- struct{}{}:
		default:
		}
		return false
	}
}

func (f *fakeModel) close() {
	f.mu.Lock()
	if f.stall != nil {
		close(f.stall)
		f.stall = nil
	}
	f.mu.Unlock()
	f.srv.Close()
}

// stallModel makes model calls hang until release is called.
func (f *fakeModel) stallModel() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.stall = ch
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.stall == ch {
				f.stall = nil
			}
			f.mu.Unlock()
			close(ch)
		})
	}
}

func (f *fakeModel) requests() []apiRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]apiRequest(nil), f.reqs...)
}
