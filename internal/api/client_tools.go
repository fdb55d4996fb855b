package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/residentd/residentd/internal/store"
)

// HistoryQuery is one channel_history request.
type HistoryQuery struct {
	Channel    string // optional; must be the capability's channel
	Before     string
	ThreadRoot string
	Limit      int // 0: the default
}

// ChannelHistory reads a page of the capability's channel.
func (c *Client) ChannelHistory(ctx context.Context, capability string, q HistoryQuery) (HistoryPage, error) {
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("channel_id", q.Channel)
	set("before", q.Before)
	set("thread_root_id", q.ThreadRoot)
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out HistoryPage
	err := c.toolGet(ctx, capability, "/v1/tools/channel_history", v, &out)
	return out, err
}

// ChannelRoster reads the capability's channel roster.
func (c *Client) ChannelRoster(ctx context.Context, capability string) (Roster, error) {
	var out Roster
	err := c.toolGet(ctx, capability, "/v1/tools/channel_roster", nil, &out)
	return out, err
}

// ProjectActivity reads the newest limit (0: the default) events of the
// capability's project.
func (c *Client) ProjectActivity(ctx context.Context, capability string, limit int) (ProjectActivity, error) {
	v := url.Values{}
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out ProjectActivity
	err := c.toolGet(ctx, capability, "/v1/tools/project_activity", v, &out)
	return out, err
}

// SetRoster replaces a channel's roster (the desktop app's push).
func (c *Client) SetRoster(ctx context.Context, channelID string, members []store.Member) error {
	if members == nil {
		members = []store.Member{}
	}
	return c.do(ctx, http.MethodPut, "/v1/channels/"+url.PathEscape(channelID)+"/roster", RosterRequest{Members: members}, nil)
}

// SetProject maps a channel to the project whose activity its agents see.
func (c *Client) SetProject(ctx context.Context, channelID, project string) error {
	return c.do(ctx, http.MethodPut, "/v1/channels/"+url.PathEscape(channelID)+"/project", ProjectRequest{Project: project}, nil)
}

// AddActivity appends project activity (the desktop app's push).
func (c *Client) AddActivity(ctx context.Context, project string, items []store.Activity) error {
	return c.do(ctx, http.MethodPost, "/v1/projects/"+url.PathEscape(project)+"/activity", ActivityRequest{Items: items}, nil)
}

// toolGet sends an authenticated GET to a tool endpoint.
func (c *Client) toolGet(ctx context.Context, capability, path string, q url.Values, out any) error {
	u := "http://residentd" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set(CapabilityHeader, capability)
	resp, err := c.roundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}
