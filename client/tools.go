package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/residentd/residentd/apitype"
)

// HistoryQuery is one channel_history request.
type HistoryQuery struct {
	Channel    string // optional; must be the capability's channel
	Before     string // a message id or RFC 3339 time; "" starts at the newest
	ThreadRoot string // read this thread instead of the main timeline
	Limit      int    // 0: the default (apitype.DefaultHistoryLimit)
}

// ChannelHistory reads a page of the capability's channel, as an agent's
// MCP server does.
func (c *Client) ChannelHistory(ctx context.Context, capability string, q HistoryQuery) (apitype.HistoryPage, error) {
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
	var out apitype.HistoryPage
	err := c.toolGet(ctx, capability, "/v1/tools/channel_history", v, &out)
	return out, err
}

// ChannelRoster reads the capability's channel roster.
func (c *Client) ChannelRoster(ctx context.Context, capability string) (apitype.Roster, error) {
	var out apitype.Roster
	err := c.toolGet(ctx, capability, "/v1/tools/channel_roster", nil, &out)
	return out, err
}

// ProjectActivity reads the newest limit (0: the default) events of the
// capability's project.
func (c *Client) ProjectActivity(ctx context.Context, capability string, limit int) (apitype.ProjectActivity, error) {
	v := url.Values{}
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out apitype.ProjectActivity
	err := c.toolGet(ctx, capability, "/v1/tools/project_activity", v, &out)
	return out, err
}

// SetRoster replaces a channel's roster (the desktop app's push).
func (c *Client) SetRoster(ctx context.Context, channelID string, members []apitype.Member) error {
	if members == nil {
		members = []apitype.Member{}
	}
	return c.do(ctx, http.MethodPut, "/v1/channels/"+url.PathEscape(channelID)+"/roster", apitype.RosterRequest{Members: members}, nil)
}

// SetProject maps a channel to the project whose activity its agents see.
func (c *Client) SetProject(ctx context.Context, channelID, project string) error {
	return c.do(ctx, http.MethodPut, "/v1/channels/"+url.PathEscape(channelID)+"/project", apitype.ProjectRequest{Project: project}, nil)
}

// AddActivity appends project activity (the desktop app's push).
func (c *Client) AddActivity(ctx context.Context, project string, items []apitype.Activity) error {
	return c.do(ctx, http.MethodPost, "/v1/projects/"+url.PathEscape(project)+"/activity", apitype.ActivityRequest{Items: items}, nil)
}

// toolGet sends a GET carrying the capability to a tool endpoint.
func (c *Client) toolGet(ctx context.Context, capability, path string, q url.Values, out any) error {
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.send(ctx, http.MethodGet, path, http.Header{apitype.CapabilityHeader: {capability}}, nil)
	if err != nil {
		return err
	}
	defer closeBody(resp)
	return decodeJSON(resp, out)
}
