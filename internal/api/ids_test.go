package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
)

// Every id the API takes, in a body, a path or a query, is refused with
// 400 invalid_id naming where it was when it is over MaxIDBytes or holds
// a control character; one of exactly MaxIDBytes passes the check. A
// message id of 33 KiB (over the store's key limit) is among them.
func TestIDLimits(t *testing.T) {
	e := newEnv(t)
	e.push(t, apitype.Message{ID: "m1", Channel: "ch", Author: "aiko", AuthorKind: apitype.AuthorUser, Body: "hi", CreatedAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)})
	long := strings.Repeat("é", apitype.MaxIDBytes/2) + "x" // 257 bytes
	huge := strings.Repeat("m", 33<<10)
	ctrl := "run\n1"
	body := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	msg := func(m map[string]any) string {
		base := map[string]any{"id": "m2", "channel_id": "ch", "author": "aiko", "author_kind": "user", "created_at": "2026-12-01T09:00:00Z", "body": "x"}
		for k, v := range m {
			base[k] = v
		}
		return body(map[string]any{"messages": []any{base}})
	}
	turn := func(k, v string) string {
		m := map[string]any{"channel_id": "ch", "binding_id": "b-builtin", "text": "@agent hi"}
		m[k] = v
		return body(m)
	}
	p := url.PathEscape
	tests := []struct {
		method, path, body, where string
	}{
		{"POST", "/v1/turns", turn("channel_id", long), `field "channel_id" is 257 bytes`},
		{"POST", "/v1/turns", turn("binding_id", ctrl), `field "binding_id" holds the control character U+000A`},
		{"POST", "/v1/turns", turn("message_id", huge), `field "message_id" is 33792 bytes`},
		{"POST", "/v1/turns", turn("thread_root_id", long), `field "thread_root_id"`},
		{"POST", "/v1/turns", turn("run_id", "run\x001"), `field "run_id" holds the control character U+0000`},
		{"POST", "/v1/turns", turn("author", long), `field "author" is 257 bytes`},
		{"POST", "/v1/runs/r1/permissions/perm-1", body(map[string]string{"option_id": "allow", "answered_by": ctrl}), `field "answered_by"`},
		{"POST", "/v1/runs/r1/elicitations/elicit-1", body(map[string]string{"action": "decline", "answered_by": long}), `field "answered_by"`},
		{"POST", "/v1/messages", msg(map[string]any{"id": huge}), `field "messages[0].id" is 33792 bytes`},
		{"POST", "/v1/messages", msg(map[string]any{"channel_id": long}), `field "messages[0].channel_id"`},
		{"POST", "/v1/messages", msg(map[string]any{"thread_root_id": ctrl}), `field "messages[0].thread_root_id"`},
		{"POST", "/v1/messages", msg(map[string]any{"binding_id": long}), `field "messages[0].binding_id"`},
		{"DELETE", "/v1/messages/ch/" + p(huge), "", `path parameter "id" is 33792 bytes`},
		{"DELETE", "/v1/messages/" + p(ctrl) + "/m1", "", `path parameter "channel"`},
		{"POST", "/v1/sessions/fresh", body(map[string]string{"channel_id": long, "binding_id": "b-builtin"}), `field "channel_id"`},
		{"GET", "/v1/sessions/options?channel_id=ch&binding_id=" + url.QueryEscape(long), "", `query parameter "binding_id"`},
		{"PUT", "/v1/sessions/options", body(map[string]any{"channel_id": "ch", "binding_id": "b-builtin", "options": map[string]string{long: "x"}}), `option id "éé`},
		{"GET", "/v1/runs/" + p(long), "", `path parameter "run" is 257 bytes`},
		{"GET", "/v1/runs/" + p(ctrl) + "/events", "", `path parameter "run" holds the control character U+000A`},
		{"POST", "/v1/runs/" + p(long) + "/cancel", "", `path parameter "run"`},
		{"POST", "/v1/turns/" + p(long) + "/cancel", "", `path parameter "run"`},
		{"POST", "/v1/runs/run-1/permissions/" + p(long), `{"option_id":"allow"}`, `path parameter "request"`},
		{"POST", "/v1/runs/run-1/permissions/perm-1", body(map[string]string{"option_id": ctrl}), `field "option_id"`},
		{"PUT", "/v1/channels/" + p(long) + "/roster", `{"members":[]}`, `path parameter "channel"`},
		{"PUT", "/v1/channels/ch/project", body(map[string]string{"project": long}), `field "project"`},
		{"POST", "/v1/projects/" + p(ctrl) + "/activity", `{"items":[{"kind":"ci","summary":"x","at":"2026-12-01T09:00:00Z"}]}`, `path parameter "project"`},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.where, func(t *testing.T) {
			status, er := e.raw(t, tt.method, tt.path, tt.body)
			if status != http.StatusBadRequest || er.Code != apitype.CodeInvalidID || !strings.Contains(er.Message, tt.where) {
				t.Fatalf("%s %.80s: %d %s %q; want 400 invalid_id naming %s", tt.method, tt.path, status, er.Code, er.Message, tt.where)
			}
		})
	}
	// At the limit, an id passes: the store takes it, the delete finds it.
	limit := strings.Repeat("é", apitype.MaxIDBytes/2)
	if status, er := e.raw(t, "POST", "/v1/messages", msg(map[string]any{"id": limit})); status != http.StatusOK {
		t.Fatalf("a message id of %d bytes: %d %+v", len(limit), status, er)
	}
	if status, er := e.raw(t, "DELETE", "/v1/messages/ch/"+p(limit), ""); status != http.StatusOK {
		t.Fatalf("delete of a message id of %d bytes: %d %+v", len(limit), status, er)
	}
}
