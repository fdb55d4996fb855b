package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/daemon"
)

// Client talks to a daemon's socket. The zero value uses DefaultSocketPath;
// Dial overrides how it connects.
type Client struct {
	Socket string
	Dial   func(ctx context.Context) (net.Conn, error)

	once sync.Once
	hc   *http.Client
}

func (c *Client) http() *http.Client {
	c.once.Do(func() {
		dial := c.Dial
		if dial == nil {
			path := c.Socket
			if path == "" {
				path = DefaultSocketPath()
			}
			dial = func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			}
		}
		c.hc = &http.Client{Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
			DisableKeepAlives: false,
			MaxIdleConns:      8,
		}}
	})
	return c.hc
}

// do sends a JSON request and decodes a JSON response into out.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://residentd"+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.roundTrip(req)
}

// roundTrip sends req and turns an error response into an *Error.
func (c *Client) roundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, fmt.Errorf("residentd: %s %s: %w (is the daemon running? start it with `residentd serve`)", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var env struct {
			Error Error `json:"error"`
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, &env) != nil || env.Error.Code == "" {
			// Not the daemon's error envelope (a proxy, an old daemon).
			return nil, &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: string(data)}
		}
		env.Error.Status = resp.StatusCode
		return nil, &env.Error
	}
	return resp, nil
}

// Health returns the daemon's health.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodGet, "/v1/health", nil, &h)
	return h, err
}

// Turn submits a mention and calls on for each event as it arrives. It
// returns the done event, or the error the daemon reported.
func (c *Client) Turn(ctx context.Context, req daemon.TurnRequest, on func(daemon.Event)) (daemon.Event, error) {
	resp, err := c.send(ctx, http.MethodPost, "/v1/turns", req)
	if err != nil {
		return daemon.Event{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev daemon.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return daemon.Event{}, fmt.Errorf("residentd: bad event line: %w", err)
		}
		if on != nil {
			on(ev)
		}
		switch ev.Event {
		case "done":
			return ev, nil
		case "error":
			return ev, &Error{Status: http.StatusOK, Code: ev.Code, Message: ev.Message}
		}
	}
	if err := sc.Err(); err != nil {
		return daemon.Event{}, fmt.Errorf("residentd: turn stream: %w", err)
	}
	return daemon.Event{}, errors.New("residentd: turn stream ended without a result")
}

// Cancel cancels a running turn by its run id.
func (c *Client) Cancel(ctx context.Context, runID string) error {
	return c.do(ctx, http.MethodPost, "/v1/turns/"+url.PathEscape(runID)+"/cancel", nil, nil)
}

// Sessions lists live sessions.
func (c *Client) Sessions(ctx context.Context) ([]SessionInfo, error) {
	var out struct {
		Sessions []SessionInfo `json:"sessions"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/sessions", nil, &out)
	return out.Sessions, err
}

// Fresh starts key (channel, binding) fresh.
func (c *Client) Fresh(ctx context.Context, channelID, binding string) (bool, error) {
	var out struct {
		Stopped bool `json:"stopped_process"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/sessions/fresh", FreshRequest{Channel: channelID, Binding: binding}, &out)
	return out.Stopped, err
}

// PutMessages pushes channel messages; it returns how many were new.
func (c *Client) PutMessages(ctx context.Context, msgs []channel.Message) (int, error) {
	var out struct {
		Added int `json:"added"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/messages", MessagesRequest{Messages: msgs}, &out)
	return out.Added, err
}

// SetLogLevel changes the daemon's log level.
func (c *Client) SetLogLevel(ctx context.Context, level string) error {
	return c.do(ctx, http.MethodPut, "/v1/log/level", LevelRequest{Level: level}, nil)
}

// LogLevel returns the daemon's current log level.
func (c *Client) LogLevel(ctx context.Context) (string, error) {
	var out LevelRequest
	err := c.do(ctx, http.MethodGet, "/v1/log/level", nil, &out)
	return out.Level, err
}

// Metrics returns the Prometheus exposition text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	resp, err := c.send(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return string(data), err
}

// Close releases idle connections.
func (c *Client) Close() {
	if c.hc != nil {
		c.hc.CloseIdleConnections()
	}
}
