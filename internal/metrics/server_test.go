package metrics

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func newServer(t *testing.T, m *Metrics) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}
