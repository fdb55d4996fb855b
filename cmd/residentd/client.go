package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
)

// bindSocket adds --socket to a client command's flag set.
func bindSocket(fs *flag.FlagSet) *string {
	return fs.String("socket", os.Getenv("RESIDENTD_SOCKET"), "daemon socket (default $XDG_RUNTIME_DIR/residentd/residentd.sock)")
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printsJSON is a client command that prints what get answers as JSON.
func printsJSON[T any](get func(*client.Client, context.Context) (T, error)) runFunc {
	return func(ctx context.Context, e *cmdEnv) error {
		v, err := get(e.client, ctx)
		if err != nil {
			return err
		}
		return printJSON(e.stdout, v)
	}
}

// keyFlags name a (channel, binding) key.
type keyFlags struct{ channel, binding string }

func (f *keyFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.channel, "channel", "", "channel id (required)")
	fs.StringVar(&f.binding, "binding", "b-builtin", "binding id")
}

// streamFlags say how mention and attach show a run.
type streamFlags struct {
	json bool
	ask  string
	as   string
}

func (f *streamFlags) bind(fs *flag.FlagSet, ask string) {
	fs.BoolVar(&f.json, "json", false, "print every event as a JSON line")
	fs.StringVar(&f.ask, "ask", "auto", ask)
	fs.StringVar(&f.as, "as", "", "the chat's user id the answers given here name (answered_by)")
}

// printer shows a run's events on stdout and, as --ask says, asks the
// person at the terminal to answer the agent's permission requests.
func (f *streamFlags) printer(ctx context.Context, e *cmdEnv) (*printer, error) {
	asking, err := askMode(f.ask, e.stdin)
	if err != nil {
		return nil, err
	}
	p := &printer{ctx: ctx, c: e.client, out: e.stdout, json: f.json, as: f.as}
	if asking {
		p.in = bufio.NewReader(e.stdin)
	}
	return p, nil
}

type mentionFlags struct {
	keyFlags
	streamFlags
	message, thread, run, author string
}

func (f *mentionFlags) bind(fs *flag.FlagSet) {
	f.keyFlags.bind(fs)
	f.streamFlags.bind(fs, "answer the agent's permission and elicitation requests from stdin: auto (when stdin is a terminal), yes or no")
	fs.StringVar(&f.author, "author", "", "the chat's user id of the mention's author (the approver when the binding's approvers are author)")
	fs.StringVar(&f.message, "message", "", "message id of the mention")
	fs.StringVar(&f.thread, "thread", "", "thread root id, if the mention is in a thread")
	fs.StringVar(&f.run, "run", "", "run id (default: generated)")
}

func runMention(ctx context.Context, e *cmdEnv, f *mentionFlags) error {
	text := strings.Join(e.args, " ")
	if f.channel == "" || text == "" {
		return errSynopsis
	}
	p, err := f.printer(ctx, e)
	if err != nil {
		return err
	}
	req := apitype.TurnRequest{Channel: f.channel, Binding: f.binding, MessageID: f.message, RunID: f.run, Text: text, Author: f.author}
	if f.thread != "" {
		req.ThreadRoot = &f.thread
	}
	done, err := e.client.Turn(ctx, req, p.event)
	if err != nil {
		return err
	}
	p.done(done)
	return nil
}

// askMode says whether mention asks the person at the terminal.
func askMode(mode string, stdin io.Reader) (bool, error) {
	switch mode {
	case "yes":
		return true, nil
	case "no":
		return false, nil
	case "auto":
		// A terminal, not any character device: /dev/null is one too.
		f, ok := stdin.(*os.File)
		return ok && term.IsTerminal(int(f.Fd())), nil
	}
	return false, fmt.Errorf("%w: --ask %q: use auto, yes or no", errUsage, mode)
}

// printer shows a run's events on a terminal, and with in set asks the
// person there to answer the agent's permission requests.
type printer struct {
	ctx  context.Context
	c    *client.Client
	out  io.Writer
	json bool
	in   *bufio.Reader
	as   string // answered_by of the answers given here
}

func (p *printer) event(ev apitype.Event) {
	if p.json {
		json.NewEncoder(p.out).Encode(ev)
	}
	switch ev.Event {
	case apitype.EventQueued:
		if !p.json {
			fmt.Fprintf(p.out, "run %s: queued (%s, position %d)\n", ev.RunID, ev.Reason, ev.Position)
		}
	case apitype.EventStarted:
		if !p.json {
			fmt.Fprintf(p.out, "run %s: %s session %s (pid %d)\n", ev.RunID, ev.Shape, ev.Native, ev.Pid)
		}
	case apitype.EventUpdate:
		if !p.json && ev.Update != nil && ev.Update.Kind == apitype.UpdateMessage {
			fmt.Fprint(p.out, ev.Update.Text)
		}
	case apitype.EventPermissionRequest:
		if ev.Permission != nil {
			p.permission(ev.RunID, *ev.Permission)
		}
	case apitype.EventPermissionDecision:
		if d := ev.Decision; !p.json && d != nil {
			fmt.Fprintf(p.out, "[permission %s: %s, by %s]\n", d.Tool, d.Kind, d.DecidedBy)
		}
	case apitype.EventElicitationRequest:
		if ev.Elicitation != nil {
			p.elicitation(ev.RunID, *ev.Elicitation)
		}
	case apitype.EventElicitationAnswer:
		if a := ev.Elicited; !p.json && a != nil {
			fmt.Fprintf(p.out, "[form %s: %s, by %s]\n", a.RequestID, a.Action, a.DecidedBy)
		}
	case apitype.EventBudget:
		if b := ev.Budget; !p.json && b != nil {
			fmt.Fprintf(p.out, "[budget %s %s: %s, %s of %s %s spent today; resets %s]\n", b.Scope, b.ID, b.Level, b.Spent, b.Limit, b.Currency, b.ResetsAt.Local().Format(time.DateTime))
		}
	}
}

// permission asks the person, or says how to answer from elsewhere. A
// request that is no longer pending (a replay: the decision follows in
// the stream) is shown as asked, without a prompt or a deadline.
func (p *printer) permission(runID string, pr apitype.PermissionRequest) {
	out := p.out
	if p.json {
		out = io.Discard
		if p.in != nil {
			out = os.Stderr // keep stdout JSON lines only
		}
	}
	pending := true
	if r, err := p.c.Run(p.ctx, runID); err == nil {
		pending = slices.ContainsFunc(r.Pending, func(q apitype.PermissionRequest) bool { return q.ID == pr.ID })
	}
	verb := "asks"
	if !pending {
		verb = "asked"
	}
	fmt.Fprintf(out, "\nthe agent %s to %s (%s)", verb, pr.ToolCall.Title, pr.ToolCall.Kind)
	for _, l := range pr.ToolCall.Locations {
		fmt.Fprintf(out, " %s", l.Path)
	}
	fmt.Fprintln(out)
	for i, o := range pr.Options {
		fmt.Fprintf(out, "  %d) %s [%s]\n", i+1, o.Name, o.Kind)
	}
	if !pending {
		return
	}
	if p.in == nil {
		fmt.Fprintf(out, "answer with: residentd answer %s %s OPTION_ID (rejected at %s without an answer)\n", runID, pr.ID, pr.ExpiresAt.Local().Format(time.Kitchen))
		return
	}
	for {
		fmt.Fprintf(out, "answer 1-%d: ", len(pr.Options))
		line, err := p.in.ReadString('\n')
		if err != nil && line == "" {
			fmt.Fprintf(out, "\nno answer read; answer with: residentd answer %s %s OPTION_ID\n", runID, pr.ID)
			return
		}
		id, ok := pickOption(pr.Options, strings.TrimSpace(line))
		if !ok {
			fmt.Fprintf(out, "%q is not one of the options\n", strings.TrimSpace(line))
			continue
		}
		if err := p.c.AnswerAs(p.ctx, runID, pr.ID, id, p.as); err != nil {
			// Another client may have answered first; the stream says how.
			fmt.Fprintln(out, err)
		}
		return
	}
}

// pickOption reads an answer: an option's number, id or kind.
func pickOption(opts []apitype.PermissionOption, answer string) (string, bool) {
	if n, err := strconv.Atoi(answer); err == nil && n >= 1 && n <= len(opts) {
		return opts[n-1].ID, true
	}
	for _, o := range opts {
		if answer == o.ID || answer == o.Kind {
			return o.ID, true
		}
	}
	return "", false
}

func (p *printer) done(ev apitype.Event) {
	if !p.json {
		fmt.Fprintf(p.out, "\n[%s, stop %s, watermark %s]\n", ev.Shape, ev.StopReason, ev.Watermark)
	}
}

type attachFlags struct {
	streamFlags
	after int64
}

func (f *attachFlags) bind(fs *flag.FlagSet) {
	f.streamFlags.bind(fs, "answer permission requests from stdin: auto, yes or no")
	fs.Int64Var(&f.after, "after", 0, "replay only the events after this sequence number")
}

func runAttach(ctx context.Context, e *cmdEnv, f *attachFlags) error {
	p, err := f.printer(ctx, e)
	if err != nil {
		return err
	}
	done, err := e.client.Follow(ctx, e.args[0], f.after, p.event)
	var nothing *client.NothingAfterError
	if errors.As(err, &nothing) {
		out := e.stdout
		if f.json {
			out = os.Stderr // keep stdout JSON lines only
		}
		fmt.Fprintf(out, "nothing after seq %d: run %s ended (%s) at seq %d\n", nothing.After, nothing.Run.ID, nothing.Run.State, nothing.Run.LastSeq)
		return nil
	}
	if err != nil {
		return err
	}
	p.done(done)
	return nil
}

func runAnswer(ctx context.Context, e *cmdEnv) error {
	run, req, option := e.args[0], e.args[1], e.args[2]
	if err := e.client.Answer(ctx, run, req, option); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "answered %s of run %s with %s\n", req, run, option)
	return nil
}

func runRuns(ctx context.Context, e *cmdEnv, asJSON *bool) error {
	runs, err := e.client.Runs(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, runs)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATE\tKEY\tSHAPE\tQUEUE\tCREATED\tPENDING")
	for _, r := range runs {
		queue := "-"
		if r.QueueReason != "" {
			queue = fmt.Sprintf("%s #%d", r.QueueReason, r.QueuePosition)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%s\t%d\n", r.ID, r.State, r.Channel, r.Binding, orDash(r.Shape), queue, r.CreatedAt.Local().Format(time.TimeOnly), len(r.Pending))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runVersion(ctx context.Context, e *cmdEnv) error {
	fmt.Fprintf(e.stdout, "residentd %s\n", version)
	v, err := e.client.Version(ctx)
	var derr *client.Error
	if err != nil && !errors.As(err, &derr) {
		// The binary's version is printed; a daemon that does not answer
		// is news, not a failure of this command.
		fmt.Fprintf(e.stdout, "daemon: not reachable on %s (%s)\n", e.client.SocketPath(), errors.Unwrap(err))
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "daemon %s, API v%s, capabilities %s\n", v.Version, v.API, strings.Join(v.Capabilities, ", "))
	return nil
}

func runPush(ctx context.Context, e *cmdEnv) error {
	var msgs []apitype.Message
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var m apitype.Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return fmt.Errorf("stdin line %d is not a channel message (one JSON object per line, fields as in POST /v1/messages): %s", n, jsonProblem(err))
		}
		msgs = append(msgs, m)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	res, err := e.client.PutMessages(ctx, msgs)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%d messages: %d new, %d edited, %d duplicates\n", len(msgs), res.Added, res.Edited, res.Duplicates)
	return nil
}

func runDelete(ctx context.Context, e *cmdEnv) error {
	ch, msg := e.args[0], e.args[1]
	if err := e.client.DeleteMessage(ctx, ch, msg); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted %s from %s\n", msg, ch)
	return nil
}

func runStatus(ctx context.Context, e *cmdEnv) error {
	c, stdout := e.client, e.stdout
	h, err := c.Health(ctx)
	if err != nil {
		return err
	}
	listing, err := c.Listing(ctx)
	if err != nil {
		return err
	}
	ss := listing.Sessions
	fmt.Fprintf(stdout, "residentd %s (pid %d): %d/%d live, %d busy, %d queued\n", h.Version, h.Pid, h.Live, h.MaxLive, h.Busy, h.Queued)
	if f := h.StorageFull; f != nil {
		fmt.Fprintf(stdout, "state file %s: its disk is full since %s, %d writes refused (storage_full); free space there: %s\n",
			f.Path, f.Since.Local().Format(time.DateTime), f.RefusedWrites, f.Error)
	}
	for _, l := range h.Listeners {
		if l.Error != "" {
			fmt.Fprintf(stdout, "%s listener %s is not serving: %s\n", l.Name, l.Addr, l.Error)
		}
	}
	for _, r := range h.RestoreStopped {
		fmt.Fprintf(stdout, "binding %s: session restores stopped after %d failures in a row (last: %s); its new processes start cold until the daemon restarts\n", r.Binding, r.Failures, r.LastError)
	}
	for _, o := range h.OptionErrors {
		fmt.Fprintf(stdout, "binding %s: session options: %s\n", o.Binding, o.Error)
	}
	for _, p := range h.PolicyAdvisories {
		fmt.Fprintf(stdout, "binding %s: permission %s, %s: %s (%s)\n", p.Binding, p.Policy, p.Agent, p.Advisory, p.Unasked)
	}
	for _, b := range h.BudgetsBlind {
		fmt.Fprintf(stdout, "binding %s: its budgets cannot see what its turns cost: %s (%s, usage_source %s)\n", b.Binding, b.Reason, b.Agent, b.UsageSource)
	}
	startable := 0
	for _, b := range h.BindingCommands {
		if b.Startable {
			startable++
			continue
		}
		fmt.Fprintf(stdout, "binding %s cannot start: %s\n", b.Binding, b.Problem)
	}
	if len(h.BindingCommands) > 0 {
		fmt.Fprintf(stdout, "bindings: %d of %d can start their agent\n", startable, len(h.BindingCommands))
	}
	bu, err := c.Budgets(ctx)
	if err != nil && !client.IsNotFound(err) { // a daemon from before budgets
		return err
	}
	for _, b := range bu.Budgets {
		if b.Level != "ok" {
			fmt.Fprintf(stdout, "budget %s %s: %s, %s of %s %s spent today; resets %s\n", b.Scope, b.ID, b.Level, b.Spent, b.Limit, b.Currency, b.ResetsAt.Local().Format(time.DateTime))
		}
	}
	for _, s := range ss {
		if line := restoreLine(sessionKey(s), s); line != "" {
			fmt.Fprintln(stdout, line)
		}
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tCOLD\tWARM\tRESTORED\tBY\tIDLE\tPID\tRSS\tNATIVE")
	for _, s := range ss {
		by := s.RestoredBy
		if by == "" {
			by = "-"
		}
		state := s.State
		if s.Working && state == "idle" {
			state = "working" // background work: not reaped nor evicted
		}
		key := sessionKey(s)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\t%s\t%s\n", key, state,
			s.Turns["cold"], s.Turns["warm"], s.Turns["restored"], by,
			(time.Duration(s.IdleS) * time.Second).Round(time.Second), s.Pid, humanBytes(s.RSSBytes), s.Native)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printResidency(stdout, ss, time.Now()); err != nil {
		return err
	}
	return printWorktrees(stdout, listing.Worktrees)
}

// printResidency is status's table of what the residency policy knows of
// each live process at now: its context, its provider cache's estimated
// expiry, and the policy's reason to keep it; nothing when no process has
// a residency (none live, or a daemon from before it).
func printResidency(stdout io.Writer, ss []apitype.Session, now time.Time) error {
	policy := ""
	for _, s := range ss {
		if s.Residency != nil {
			policy = s.Residency.Policy
		}
	}
	if policy == "" {
		return nil
	}
	fmt.Fprintf(stdout, "\nresidency policy %s\n", policy)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tCONTEXT\tCACHE TTL\tCACHE\tKEEP")
	for _, s := range ss {
		r := s.Residency
		if r == nil {
			continue
		}
		key := s.Channel + "/" + s.Binding
		if s.ThreadRoot != "" {
			key += "#" + s.ThreadRoot
		}
		ctx := fmt.Sprintf("%d", r.ContextTokens)
		if r.ContextSource == "estimate" {
			ctx = "~" + ctx // a quarter of the bytes sent and received
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", key, ctx, time.Duration(r.CacheTTLS*float64(time.Second)), cacheState(r, now), r.Keep)
	}
	return tw.Flush()
}

// cacheState says when r's provider cache expires (the daemon's estimate)
// as seen at now.
func cacheState(r *apitype.SessionResidency, now time.Time) string {
	switch {
	case r.CacheExpires == nil:
		return "none yet"
	case r.CacheExpires.After(now):
		return "expires in " + r.CacheExpires.Sub(now).Round(time.Second).String()
	}
	return "expired " + now.Sub(*r.CacheExpires).Round(time.Second).String() + " ago"
}

// printWorktrees is status's table of the keys' worktrees: each key's
// branch, its uncommitted changes (? when git status did not answer) and
// folder; nothing when there are none.
func printWorktrees(stdout io.Writer, wts []apitype.Worktree) error {
	if len(wts) == 0 {
		return nil
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKTREE OF\tBRANCH\tCHANGES\tPATH")
	for _, w := range wts {
		key := w.Channel + "/" + w.Binding
		if w.ThreadRoot != "" {
			key += "#" + w.ThreadRoot
		}
		changes := strconv.Itoa(w.Changes)
		if w.StatusError != "" {
			changes = "?"
		}
		note := ""
		if w.BindingRemoved {
			note = "  (binding removed; left for its uncommitted changes)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\n", key, w.Branch, changes, w.Path, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, w := range wts {
		if w.StatusError != "" {
			fmt.Fprintf(stdout, "worktree %s: git status: %s\n", w.Path, w.StatusError)
		}
	}
	return nil
}

// sessionKey is a session's key as status prints it:
// channel/binding[#thread].
func sessionKey(s apitype.Session) string {
	key := s.Channel + "/" + s.Binding
	if s.ThreadRoot != "" {
		key += "#" + s.ThreadRoot // a thread's own session
	}
	return key
}

// restoreLine says how a session's process came to its session when that
// was more than one way that reopened it at once: the ways that did not,
// a new session, what was set aside, forgotten or caught up; "" otherwise.
func restoreLine(key string, s apitype.Session) string {
	r := s.Restore
	if r == nil || len(r.Steps) == 1 && r.Steps[0].Result == apitype.RestoreOK && r.SetAside == "" && len(r.Forgotten) == 0 && r.CaughtUp == 0 && r.Message == "" {
		return ""
	}
	var parts []string
	for _, st := range r.Steps {
		parts = append(parts, fmt.Sprintf("%s of %s %s after %.1fs (pid %d)", st.Method, st.Native, st.Result, st.Seconds, st.Pid))
	}
	if r.Message != "" {
		parts = append(parts, r.Message)
	}
	if s.RestoredBy == "" {
		parts = append(parts, "new session "+s.Native)
	}
	if r.CaughtUp > 0 {
		parts = append(parts, fmt.Sprintf("given the %d stored turns it missed", r.CaughtUp))
	}
	if r.SetAside != "" {
		parts = append(parts, r.SetAside+" set aside: the key's next restore tries it first")
	}
	for _, f := range r.Forgotten {
		parts = append(parts, f+" forgotten")
	}
	return key + ": restore: " + strings.Join(parts, "; ")
}

type optionsFlags struct {
	keyFlags
	clear bool
}

func (f *optionsFlags) bind(fs *flag.FlagSet) {
	f.keyFlags.bind(fs)
	fs.BoolVar(&f.clear, "clear", false, "drop the key's own options: its sessions get the binding's")
}

func runOptions(ctx context.Context, e *cmdEnv, f *optionsFlags) error {
	if f.channel == "" || (f.clear && len(e.args) > 0) {
		return errSynopsis
	}
	c := e.client
	o, err := c.SessionOptions(ctx, f.channel, f.binding)
	if err != nil {
		return err
	}
	if !f.clear && len(e.args) == 0 {
		return printJSON(e.stdout, o)
	}
	// The key's own options, changed by what the arguments say.
	opts := o.Options
	if f.clear {
		opts = map[string]string{}
	}
	for _, a := range e.args {
		id, v, ok := strings.Cut(a, "=")
		if !ok || id == "" || v == "" {
			return fmt.Errorf("%w: option %q must be ID=VALUE, e.g. model=sonnet", errUsage, a)
		}
		opts[id] = v
	}
	if o, err = c.SetSessionOptions(ctx, f.channel, f.binding, opts); err != nil {
		return err
	}
	return printJSON(e.stdout, o)
}

func runBudgets(ctx context.Context, e *cmdEnv) error {
	b, err := e.client.Budgets(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "budget day %s, resets %s\n", b.Day, b.ResetsAt.Local().Format(time.DateTime))
	if len(b.Budgets) == 0 {
		fmt.Fprintln(e.stdout, "no daily budgets are configured (budgets in the config)")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tID\tSPENT\tLIMIT\tSHARE\tLEVEL")
	for _, x := range b.Budgets {
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%.0f%%\t%s\n", x.Scope, x.ID, x.Spent, x.Currency, x.Limit, 100*x.Spent.Float()/x.Limit.Float(), x.Level)
	}
	return tw.Flush()
}

func humanBytes(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%dK", n>>10)
}

type freshFlags struct {
	keyFlags
	thread        string
	resetWorktree bool
}

func (f *freshFlags) bind(fs *flag.FlagSet) {
	f.keyFlags.bind(fs)
	fs.StringVar(&f.thread, "thread", "", "a thread's root message id: start the thread's own session fresh (a binding with scope thread)")
	fs.BoolVar(&f.resetWorktree, "reset-worktree", false, "also reset the key's git worktree (workspace worktree): removed so the next session gets a new one from HEAD; refused while it has uncommitted changes")
}

func runFresh(ctx context.Context, e *cmdEnv, f *freshFlags) error {
	if f.channel == "" {
		return errSynopsis
	}
	key := f.channel + "/" + f.binding
	req := apitype.FreshRequest{Channel: f.channel, Binding: f.binding, ResetWorktree: f.resetWorktree}
	if f.thread != "" {
		key += "#" + f.thread
		req.ThreadRoot = &f.thread
	}
	var out apitype.FreshResponse
	var err error
	if f.resetWorktree {
		out, err = e.client.FreshWith(ctx, req)
	} else if f.thread != "" { // the calls of a daemon from before worktrees
		out.StoppedProcess, err = e.client.FreshThread(ctx, f.channel, f.binding, f.thread)
	} else {
		out.StoppedProcess, err = e.client.Fresh(ctx, f.channel, f.binding)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s starts fresh (process stopped: %v)\n", key, out.StoppedProcess)
	switch w := out.Worktree; {
	case f.resetWorktree && w == nil:
		fmt.Fprintf(e.stdout, "%s has no worktree to reset\n", key)
	case w != nil:
		fmt.Fprintf(e.stdout, "worktree %s reset (folder removed: %v); ", w.Path, w.Removed)
		if w.BranchKept != "" {
			fmt.Fprintf(e.stdout, "branch %s had commits HEAD has not: kept as %s\n", w.Branch, w.BranchKept)
		} else {
			fmt.Fprintf(e.stdout, "branch %s deleted (HEAD has all its commits)\n", w.Branch)
		}
	}
	return nil
}

// runReload has the daemon reload its config file and prints what each
// binding got; a refused file is an error (exit 1) that says why.
func runReload(ctx context.Context, e *cmdEnv, asJSON *bool) error {
	out, err := e.client.ReloadConfig(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(e.stdout).Encode(out)
	}
	fmt.Fprintf(e.stdout, "reloaded %s\n", out.File)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BINDING\tACTION\tPROCESSES\tCHANGES")
	for _, b := range out.Bindings {
		var ch []string
		for _, x := range b.Changes {
			ch = append(ch, x.Setting+" ("+x.Class+")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", b.Binding, b.Action, b.Processes, strings.Join(ch, ", "))
	}
	tw.Flush()
	for _, x := range out.Settings {
		fmt.Fprintf(e.stdout, "setting %s: %s\n", x.Setting, x.Class)
	}
	if len(out.Restart) > 0 {
		fmt.Fprintf(e.stdout, "not applied until a restart: %s\n", strings.Join(out.Restart, ", "))
	}
	return nil
}

func runCancel(ctx context.Context, e *cmdEnv) error {
	if err := e.client.Cancel(ctx, e.args[0]); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "cancelled %s\n", e.args[0])
	return nil
}

func runLogLevel(ctx context.Context, e *cmdEnv) error {
	if len(e.args) == 1 {
		if err := e.client.SetLogLevel(ctx, e.args[0]); err != nil {
			return err
		}
	}
	level, err := e.client.LogLevel(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, level)
	return nil
}

// jsonProblem says what is wrong with a JSON line without Go type names.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &pe):
		return fmt.Sprintf("created_at %q is not an RFC 3339 time such as 2026-12-01T09:00:00Z", pe.Value)
	case errors.As(err, &te) && te.Field != "":
		return fmt.Sprintf("field %q has the wrong type (got a JSON %s)", te.Field, te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("want a JSON object, got a JSON %s", te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

type eventsFlags struct {
	after  int64
	asJSON bool
}

func (f *eventsFlags) bind(fs *flag.FlagSet) {
	fs.Int64Var(&f.after, "after", 0, "show only the announcements after this sequence number (0: all the feed holds; beyond the newest: from now on)")
	fs.BoolVar(&f.asJSON, "json", false, "print each announcement as a JSON line")
}

// runEvents follows the daemon-wide feed of runs started and ended until
// interrupted.
func runEvents(ctx context.Context, e *cmdEnv, f *eventsFlags) error {
	var werr error
	err := e.client.Events(ctx, f.after, func(ev apitype.FeedEvent) {
		if werr != nil {
			return
		}
		if f.asJSON {
			line, _ := json.Marshal(ev)
			_, werr = fmt.Fprintf(e.stdout, "%s\n", line)
			return
		}
		key := ev.Channel + "/" + ev.Binding
		_, werr = fmt.Fprintf(e.stdout, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", ev.Seq, ev.At.Local().Format(time.TimeOnly), ev.Event, ev.RunID, ev.Kind, key, ev.State)
	})
	if errors.Is(err, context.Canceled) {
		return werr // interrupted: the normal end
	}
	return errors.Join(err, werr)
}
