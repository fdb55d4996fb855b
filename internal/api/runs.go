package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/run"
)

// Features lists what this daemon's /v1 offers beyond the first version's
// turns, sessions and messages: a capability for each feature a client may
// test for (docs/API.md, "Capabilities").
var Features = []string{
	apitype.CapabilityRuns, apitype.CapabilityPermissions, apitype.CapabilityKeepalive, apitype.CapabilityLeanStream,
	apitype.CapabilityDurableRuns, apitype.CapabilityEventFeed, apitype.CapabilityAgentRuns, apitype.CapabilityEventsUntil,
	apitype.CapabilityAttachments, apitype.CapabilityMessageDelete,
	apitype.CapabilityBurstsCoalesce, apitype.CapabilityBurstsSteer, apitype.CapabilityContextHeld, apitype.CapabilityThreadScope,
	apitype.CapabilitySessionOptions, apitype.CapabilityBudgets, apitype.CapabilityExactMoney,
	apitype.CapabilityConfigReload, apitype.CapabilityTraces, apitype.CapabilityAgentTools, apitype.CapabilityWorktrees,
	apitype.CapabilityElicitation, apitype.CapabilityApprovers,
	apitype.CapabilityBackgroundWork,
}

// APIVersion is the local API's version: /v1 only grows (new endpoints,
// fields, events and codes); nothing a client relies on is removed or
// changes meaning within it.
const APIVersion = "1"

func (s *Server) versionInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, apitype.Version{Version: s.version, API: APIVersion, Capabilities: Features})
}

// turn starts a run for a mention and streams it as NDJSON until it ends.
// The run does not depend on this connection: a client that goes away
// stops reading, nothing else. When the run fails before its first event
// (a spawn that fails, a full queue), the failure is a plain JSON error
// with its status, as every other endpoint reports errors.
func (s *Server) turn(w http.ResponseWriter, r *http.Request) {
	var req apitype.TurnRequest
	if err := decode(w, r, MaxTurnBody, &req); err != nil {
		fail(w, err)
		return
	}
	// W3C trace context: the headers win over the request's fields.
	if tp := r.Header.Get("Traceparent"); tp != "" {
		req.TraceContext = &apitype.TraceContext{Traceparent: tp, Tracestate: r.Header.Get("Tracestate")}
	}
	q := r.URL.Query() // parsed once: a turn reads three of its values
	thread := ""
	if req.ThreadRoot != nil {
		thread = *req.ThreadRoot
	}
	if err := checkIDs(field("channel_id", req.Channel), field("binding_id", req.Binding), field("message_id", req.MessageID), field("thread_root_id", thread), field("run_id", req.RunID), field("author", req.Author)); err != nil {
		fail(w, err)
		return
	}
	detach := false
	switch v := q.Get("stream"); v {
	case "", "true":
	case "false":
		detach = true
	default:
		fail(w, fmt.Errorf("%w: stream=%q: use true (the default) or false", errBadRequest, v))
		return
	}
	lean, err := checkLean(q)
	if err != nil {
		fail(w, err)
		return
	}
	rn, err := s.turns.Submit(req)
	if err != nil {
		fail(w, err)
		return
	}
	if detach {
		writeJSON(w, http.StatusAccepted, rn.Snapshot())
		return
	}
	s.follow(w, r, rn, 0, true, lean, "")
}

// events re-attaches to a run: the buffered events after ?after=SEQ, then
// the live ones until the run ends. SEQ may be beyond the run's last
// event: the stream then carries the events numbered above SEQ, none when
// the run ends first, and ends with the run. With ?until=KIND it ends
// after the first event of that kind instead, when one comes first.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	rn, err := s.pathRun(r)
	if err != nil {
		fail(w, err)
		return
	}
	q := r.URL.Query()
	lean, err := checkLean(q)
	if err != nil {
		fail(w, err)
		return
	}
	after, err := checkAfter(q, "event")
	if err != nil {
		fail(w, err)
		return
	}
	until, err := checkUntil(q)
	if err != nil {
		fail(w, err)
		return
	}
	s.follow(w, r, rn, after, false, lean, until)
}

// untilKinds are the event kinds ?until= may name: a run's events
// (keepalive lines are not).
var untilKinds = []string{apitype.EventQueued, apitype.EventRestoring, apitype.EventStarted, apitype.EventUpdate,
	apitype.EventPermissionRequest, apitype.EventPermissionDecision, apitype.EventElicitationRequest, apitype.EventElicitationAnswer,
	apitype.EventBudget, apitype.EventInterrupted, apitype.EventDone, apitype.EventError}

// checkUntil validates ?until=: the event kind after whose first event the
// stream ends; "" for none.
func checkUntil(q url.Values) (string, error) {
	v := q.Get("until")
	if v == "" || slices.Contains(untilKinds, v) {
		return v, nil
	}
	return "", fmt.Errorf("%w: until=%q: name the kind of a run's event to stop after: %s", errBadRequest, v, strings.Join(untilKinds, ", "))
}

// eventKind is the kind of an encoded event line: its first field.
func eventKind(line []byte) string {
	const prefix = `{"event":"`
	if rest, ok := bytes.CutPrefix(line, []byte(prefix)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 {
			return string(rest[:i])
		}
	}
	var ev struct {
		Event string `json:"event"`
	}
	_ = json.Unmarshal(line, &ev)
	return ev.Event
}

// pathRun is the run the request's path names.
func (s *Server) pathRun(r *http.Request) (*run.Run, error) {
	if err := checkIDs(inPath("run", r.PathValue("run"))); err != nil {
		return nil, err
	}
	return s.turns.Run(r.PathValue("run"))
}

// checkAfter validates ?after=: the seq of the last item (an event, an
// announcement) the client has; 0 when it is not given.
func checkAfter(q url.Values, item string) (int64, error) {
	v := q.Get("after")
	if v == "" {
		return 0, nil
	}
	after, err := strconv.ParseInt(v, 10, 64)
	if err != nil || after < 0 {
		return 0, fmt.Errorf("%w: after %q must be a sequence number (0 or more): the seq of the last %s you have", errBadRequest, v, item)
	}
	return after, nil
}

// checkLean validates ?lean=: true asks for the lean stream (the reply
// once: text chunks without raw, done without the text the chunks carried).
func checkLean(q url.Values) (bool, error) {
	switch v := q.Get("lean"); v {
	case "", "true", "false":
		return v == "true", nil
	default:
		return false, fmt.Errorf("%w: lean=%q: use true (the reply once: text chunks without raw, done without text) or false (the default)", errBadRequest, v)
	}
}

// startHold is how long a started event may wait for the turn's first
// output before it is flushed on its own.
const startHold = 5 * time.Millisecond

// follow streams rn's events after seq after until the run ends, an event
// of kind until ("": none) is out, or the client goes away, with a
// keepalive line whenever the stream has been quiet for the keepalive
// interval.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, rn *run.Run, after int64, plainFirstError, lean bool, until string) {
	flusher, _ := w.(http.Flusher)
	started := false
	start := func() {
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
	}
	keep := time.NewTimer(s.keepalive)
	defer keep.Stop()
	// A started event waits briefly for the turn's first output so that
	// both go out in one write; a turn that takes longer flushes it alone.
	hold := time.NewTimer(startHold)
	hold.Stop()
	defer hold.Stop()
	var lines [][]byte // each read's, reused
	for {
		b := rn.ReadInto(after, lean, lines)
		lines = b.Lines
		if b.Gone {
			snap := rn.Snapshot()
			msg := fmt.Sprintf("events after seq %d of run %q fell out of its buffer (the settings runs.events and runs.bytes bound it); the run's state and result are in this response and at GET /v1/runs/%s", after, rn.ID, rn.ID)
			if !started {
				writeJSON(w, http.StatusGone, apitype.EventsGone{Error: apitype.Error{Code: apitype.CodeEventsGone, Message: msg}, Run: snap})
				return
			}
			line, _ := json.Marshal(apitype.Event{Event: apitype.EventError, RunID: rn.ID, At: time.Now(), Code: apitype.CodeEventsGone, Message: msg})
			w.Write(append(line, '\n'))
			return
		}
		if len(b.Lines) > 0 {
			if !started && plainFirstError && b.Ended && len(b.Lines) == 1 {
				if ev, err, _ := rn.Result(); ev.Event == apitype.EventError {
					writeError(w, statusOf(ev.Code), ev.Code, errText(err, ev))
					return
				}
			}
			start()
			for _, l := range b.Lines {
				if _, err := w.Write(l); err != nil {
					return // the client went away; the run goes on
				}
				if until != "" && eventKind(l) == until {
					if flusher != nil {
						flusher.Flush()
					}
					return
				}
			}
			switch {
			case flusher == nil:
			case b.Hold && !b.Ended:
				hold.Reset(startHold)
			default:
				hold.Stop()
				flusher.Flush()
			}
			after = b.Last
			keep.Reset(s.keepalive)
		}
		if b.Ended {
			start() // an empty replay of an ended run is an empty stream
			return
		}
		select {
		case <-b.Changed:
		case <-hold.C:
			if flusher != nil {
				flusher.Flush()
			}
		case <-keep.C:
			start()
			line, _ := json.Marshal(apitype.Event{Event: apitype.EventKeepalive, RunID: rn.ID, At: time.Now()})
			if _, err := w.Write(append(line, '\n')); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
			keep.Reset(s.keepalive)
		case <-r.Context().Done():
			return
		}
	}
}

// runFeed streams the daemon's run announcements after ?after=SEQ (0: from
// the oldest kept; a client that wants only what comes next passes the
// last seq it knows), then the live ones until the client goes away, with
// keepalives while it is quiet.
func (s *Server) runFeed(w http.ResponseWriter, r *http.Request) {
	after, err := checkAfter(r.URL.Query(), "announcement")
	if err != nil {
		fail(w, err)
		return
	}
	f := s.turns.RunFeed()
	b := f.Read(after)
	if b.Gone {
		writeError(w, http.StatusGone, apitype.CodeEventsGone, fmt.Sprintf("announcements after seq %d fell out of the feed (it keeps the newest %d); list the runs with GET /v1/runs and follow the feed from seq %d", after, run.DefaultFeed, f.Last()))
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	keep := time.NewTimer(s.keepalive)
	defer keep.Stop()
	for {
		if b.Gone {
			return // fell behind the feed's bound: re-attaching says so (410)
		}
		for _, l := range b.Lines {
			if _, err := w.Write(l); err != nil {
				return
			}
		}
		// The position read to: past a position beyond the newest too, so
		// the next read starts at the newest there was.
		after = b.Last
		if len(b.Lines) > 0 {
			keep.Reset(s.keepalive)
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-b.Changed:
		case <-keep.C:
			line, _ := json.Marshal(apitype.FeedEvent{Event: apitype.EventKeepalive, At: time.Now()})
			if _, err := w.Write(append(line, '\n')); err != nil {
				return
			}
			keep.Reset(s.keepalive)
		case <-r.Context().Done():
			return
		}
		b = f.Read(after)
	}
}

func errText(err error, ev apitype.Event) string {
	if err != nil {
		return err.Error()
	}
	return ev.Message
}

func (s *Server) runs(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, apitype.Runs{Runs: s.turns.Runs()})
}

func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	rn, err := s.pathRun(r)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rn.Snapshot())
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	var req apitype.PermissionAnswer
	if err := decode(w, r, MaxSmallBody, &req); err != nil {
		fail(w, err)
		return
	}
	if req.OptionID == "" {
		fail(w, fmt.Errorf("%w: option_id is required: one of the options in the permission_request event", errBadRequest))
		return
	}
	id, reqID := r.PathValue("run"), r.PathValue("request")
	if err := checkIDs(inPath("run", id), inPath("request", reqID), field("option_id", req.OptionID), field("answered_by", req.AnsweredBy)); err != nil {
		fail(w, err)
		return
	}
	err := s.turns.AnswerAs(id, reqID, req.OptionID, req.AnsweredBy)
	reply(w, http.StatusOK, apitype.PermissionAnswered{RunID: id, RequestID: reqID, OptionID: req.OptionID, AnsweredBy: req.AnsweredBy}, err)
}

// elicited takes an answer to an elicitation request: accept with the
// form's content, decline or cancel.
func (s *Server) elicited(w http.ResponseWriter, r *http.Request) {
	var req apitype.ElicitationAnswer
	if err := decode(w, r, MaxSmallBody, &req); err != nil {
		fail(w, err)
		return
	}
	if req.Action == "" || req.RequestID != "" || req.DecidedBy != "" {
		fail(w, fmt.Errorf("%w: the answer is {action, content, answered_by}: action accept (with content), decline or cancel", errBadRequest))
		return
	}
	id, reqID := r.PathValue("run"), r.PathValue("request")
	if err := checkIDs(inPath("run", id), inPath("request", reqID), field("answered_by", req.AnsweredBy)); err != nil {
		fail(w, err)
		return
	}
	err := s.turns.AnswerElicitation(id, reqID, req)
	reply(w, http.StatusOK, apitype.ElicitationAnswered{RunID: id, RequestID: reqID, Action: req.Action, AnsweredBy: req.AnsweredBy}, err)
}
