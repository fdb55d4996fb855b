package lease

import (
	"fmt"
	"slices"
	"strings"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/session"
)

// Input is everything that decides what one turn sends. The loaders are
// called only when their result is sent: a warm turn never reads the
// framing (it may live in a file) or the stored conversation.
type Input struct {
	Shape  Shape
	Native string // the native session that answers; a watermark of any other is ignored

	// Framing returns the binding's system framing.
	Framing func() (string, error)
	// Brief is the binding's brief; "" means delivery.DefaultBrief.
	Brief     string
	Placement delivery.Placement
	// BriefEvery re-sends the full brief every N warm turns with
	// delivery.InFraming; BriefCount is how many warm turns this process has
	// answered since it last got it.
	BriefEvery int
	BriefCount int
	// BriefDue: the agent compacted its history since the brief last went
	// out, so this warm turn carries it in full (delivery.InFraming).
	BriefDue bool
	// SystemPrompt: the session took the framing (and, with
	// delivery.InFraming, the brief) as its system prompt when it was
	// opened or reopened, so no turn carries them: a cold turn is its
	// replay, a restored one its newest turn, and a warm one never sends
	// the brief again on the brief_every count (a compaction keeps the
	// system prompt).
	SystemPrompt bool
	// SeenFacts is the facts JSON the warm process was last given
	// (delivery.InFraming); a restored turn compares with the newest stored
	// user turn's instead, and with SeenFacts when the key has none (a
	// fork, given its source's).
	SeenFacts string

	// Conversation returns the key's stored turns, oldest first, for a replay.
	Conversation func() ([]session.Turn, error)
	// Missed is how many of the newest stored turns a restored session
	// lacks (a set-aside session reopened: a stand-in answered them); they
	// go before the mention, as a replay.
	Missed int

	Mention delivery.Payload
	// Listed are the message ids of the other mentions this turn answers
	// (a coalesced turn lists them in its text): carried, as the mention
	// is. Held are those of the mentions waiting on the key for a later
	// turn: left out of the block, and not seen until a turn carries them.
	Listed, Held []string

	// Unseen reads the mention's timeline: the messages that arrived after
	// after (and a thread's root, and the messages of also) as candidates
	// for pick, and the chosen rows (the store's Unseen).
	Unseen func(after uint64, also, known []string, pick func([]channel.Candidate) []int) (channel.View, error)
	// Watermark is the stored record for the key and timeline, Main the
	// key's main-timeline record for a thread mention (nil when none). Only
	// a binding that keeps its session uses them and stages what it saw.
	Watermark    *channel.Watermark
	Main         *channel.Watermark
	KeepsSession bool
	Self         channel.Self
	OmitOwn      bool
	Render       delivery.RenderOptions
}

// Output is what Compose decided.
type Output struct {
	Text       string // the prompt to send
	Turn       string // the newest user turn as sent, the end of Text
	Stored     string // the user turn to keep in the conversation: intro and payload only
	Framing    string // the system part sent ("" on a warm turn): a changed one costs the cache
	Facts      string // the key's facts JSON (delivery.InFraming): kept with the stored turn and by the process
	BriefSent  bool   // the full brief went out, in the turn or with the framing
	BriefCount int    // the process's warm turns since the full brief, after this turn
	Context    delivery.Report
	// Stage is what a successful run commits to the watermark: empty for a
	// binding that keeps no session. Marks are what it commits to the
	// watermarks of other timelines (by thread id, "" for the main one): a
	// thread's root for the main timeline, and the mentions a replay
	// carried for their own timelines.
	Stage channel.Seen
	Marks map[string][]channel.Mark
	// MentionSeq is the arrival of the mention's current version (0: not
	// pushed yet), kept with the stored turn.
	MentionSeq uint64
	// Attachments go with the prompt: the mention's, a replay's mentions',
	// then the shown lines', each message's once, none the session saw
	// (see attachments).
	Attachments []channel.Attachment
}

// Header names the context block that went out: "new" (since the
// watermark), "snapshot" (no watermark) or "none" (no block).
func (o Output) Header() string {
	switch {
	case o.Context.Lines == 0:
		return "none"
	case o.Context.Watermarked:
		return "new"
	}
	return "snapshot"
}

// own returns w when it belongs to the answering native session.
func (in Input) own(w *channel.Watermark) *channel.Watermark {
	if !in.KeepsSession || w == nil {
		return nil
	}
	if o, ok := w.For(in.Native); ok {
		return &o
	}
	return nil
}

// Compose is the one place a turn's prompt is decided. By the lease shape:
//
//	restored, newest turn not blank: framing + "\n\n" + newest user turn
//	cold, or a blank newest turn:    framing + "\n\n" + the whole conversation replayed
//	warm:                            the newest user turn, nothing else
//
// A restored session that missed the newest stored turns (Missed: a
// set-aside session reopened after a stand-in answered them) gets them
// first, after delivery.CaughtUp, as a replay of those turns alone.
// Replaying into a warm process would feed it its own replies as new input
// every turn, which grows quadratically; that is why the order is fixed.
// "Newest turn" is the mention's text (the spec's latest_user_turn). The
// user turn itself is the intro, the payload, the brief (or its pointer)
// and the channel-context block of what the session has not seen; the
// conversation keeps only its intro and payload, so a replay carries the
// brief once and no old block, and the replay's block leaves out the
// mentions the replay already holds.
func Compose(in Input) (Output, error) {
	var out Output
	blank := strings.TrimSpace(in.Mention.Text) == ""
	replay := blank || in.Shape == Cold
	catchUp := !replay && in.Shape == Restored && in.Missed > 0
	var (
		conv     []session.Turn
		missed   []session.Turn // what a catch-up replays (the newest Missed of conv)
		replayed []channel.Mark // the mention versions a replay carries
	)
	known := []string{in.Mention.MessageID}
	for _, id := range in.Listed {
		if !slices.Contains(known, id) {
			known = append(known, id)
		}
	}
	carried := len(known) // the mention and the listed ones
	if replay || catchUp {
		var err error
		if conv, err = in.Conversation(); err != nil {
			return Output{}, fmt.Errorf("lease: compose: %w", err)
		}
		carriedConv := conv
		if catchUp {
			missed = conv[max(0, len(conv)-in.Missed):]
			carriedConv = missed
		}
		for _, t := range carriedConv {
			if t.MessageID != "" && !slices.Contains(known, t.MessageID) {
				known = append(known, t.MessageID)
				replayed = append(replayed, channel.Mark{ID: t.MessageID, Seq: t.MessageSeq})
			}
			// The other mentions it answered: any unedited version.
			for _, id := range t.Answers {
				if id != "" && !slices.Contains(known, id) {
					known = append(known, id)
					replayed = append(replayed, channel.Mark{ID: id})
				}
			}
		}
	}

	wm := in.own(in.Watermark)
	opt := delivery.SelectOptions{Watermark: wm, Main: in.own(in.Main), Mention: in.Mention.MessageID, Replayed: replayed, Listed: in.Listed, Held: in.Held,
		Self: in.Self, OmitOwn: in.OmitOwn, Limit: in.Render.Limit}
	if in.Mention.ThreadRootID != nil {
		opt.Root = *in.Mention.ThreadRootID
	}
	var (
		after uint64
		holes []string
	)
	if wm != nil {
		after = wm.Seq
		for _, h := range wm.Held {
			if !slices.Contains(holes, h.ID) {
				holes = append(holes, h.ID)
			}
		}
	}
	var sel delivery.Selection
	view, err := in.Unseen(after, holes, known, func(c []channel.Candidate) []int {
		sel = delivery.Select(c, opt)
		return sel.Show
	})
	if err != nil {
		return Output{}, fmt.Errorf("lease: compose: %w", err)
	}
	// A watermark that holds only marks (mentions answered before anything
	// was pushed) has seen no block yet: the first one is a snapshot.
	block, rep := delivery.Build(view, sel, wm != nil && wm.Seq > 0, in.Render)
	out.Context = rep
	var mention channel.Known
	if i := slices.IndexFunc(view.Known, func(k channel.Known) bool { return k.ID == in.Mention.MessageID }); i >= 0 {
		mention = view.Known[i]
	}
	out.MentionSeq = mention.Seq
	if in.Mention.Author == "" {
		in.Mention.Author = mention.Author
	}
	out.Attachments = attachments(wm, view, sel, view.Known[:carried], replayed)
	if in.KeepsSession {
		out.Stage = stage(wm, view.Seq, view.Known[:carried], sel.Held)
		out.Marks = marks(in.own(in.Main), opt.Root, sel.Root, replayed, view.Known)
	}

	brief := in.Brief
	if brief == "" {
		brief = delivery.DefaultBrief
	}
	if in.Placement == delivery.InFraming {
		if err := floor(in, &out, brief, block, blank, conv, missed); err != nil {
			return Output{}, fmt.Errorf("lease: compose: %w", err)
		}
		return out, nil
	}
	framed := in.Shape != Warm && !in.SystemPrompt
	turn := delivery.UserTurn(in.Mention, brief, block)
	out.Turn = turn
	out.Stored = delivery.StoredTurn(in.Mention)
	out.BriefSent = true
	out.BriefCount = in.BriefCount

	if !framed && !replay && !catchUp {
		out.Text = turn
		return out, nil
	}
	lead, err := in.framing(&out)
	if err != nil {
		return Output{}, fmt.Errorf("lease: compose: %w", err)
	}
	if catchUp {
		turns := append(missed[:len(missed):len(missed)], session.Turn{Role: session.RoleUser, Text: turn})
		out.Text = lead + delivery.CaughtUp + "\n\n" + delivery.BuildPrompt(turns)
		return out, nil
	}
	if !replay {
		out.Text = lead + turn
		return out, nil
	}
	turns := append(conv[:len(conv):len(conv)], session.Turn{Role: session.RoleUser, Text: turn})
	out.Text = lead + delivery.BuildPrompt(turns)
	return out, nil
}

// framing is what a cold or restored turn starts with: the framing and a
// blank line, or nothing when the session has it as its system prompt.
// out.Framing records what went.
func (in Input) framing(out *Output) (string, error) {
	if in.SystemPrompt {
		return "", nil
	}
	system, err := in.Framing()
	if err != nil {
		return "", err
	}
	out.Framing = system
	return system + "\n\n", nil
}

// floor composes a turn with the brief in the framing, at the floor of
// what each shape needs:
//
//	cold, or a blank newest turn: framing + brief + "Channel facts: {…}" + the replay, whose newest
//	                              turn is the mention line and the block
//	warm:                         [the brief, when due] [one "Channel facts changed: {…}" line, when they
//	                              changed] + the mention line + the block
//	restored:                     delivery.Reopened [+ delivery.CaughtUp and the turns it missed] + the
//	                              warm shape; facts compared with the newest stored user turn's it saw
//
// The stored user turn is the mention line, its facts kept beside it.
func floor(in Input, out *Output, brief, block string, blank bool, conv, missed []session.Turn) error {
	facts := in.Mention.Facts().JSON()
	m := in.Mention.Mention().JSON()
	out.Facts, out.Stored = facts, m
	if in.Shape == Cold || blank {
		lead := ""
		if !in.SystemPrompt {
			system, err := in.Framing()
			if err != nil {
				return err
			}
			system += "\n\n" + brief
			out.Framing, lead = system, system+"\n\n"
		}
		out.BriefSent, out.BriefCount = true, 0
		out.Turn = delivery.FloorTurn(nil, m, block)
		turns := append(conv[:len(conv):len(conv)], session.Turn{Role: session.RoleUser, Text: out.Turn})
		out.Text = lead + delivery.FactsPrefix + facts + "\n\n" + delivery.BuildPrompt(turns)
		return nil
	}
	var before [4]string
	seen := in.SeenFacts
	if in.Shape == Restored {
		before[0] = delivery.Reopened
		if conv == nil {
			var err error
			if conv, err = in.Conversation(); err != nil {
				return err
			}
		}
		if len(missed) > 0 {
			before[1] = delivery.CaughtUp + "\n\n" + delivery.BuildPrompt(missed)
			conv = conv[:len(conv)-len(missed)] // the turns it saw
		}
		// A fork's key has no turn yet: the process holds its source's
		// facts (SeenFacts).
		for i := len(conv) - 1; i >= 0; i-- {
			if conv[i].Role == session.RoleUser {
				seen = conv[i].Facts
				break
			}
		}
	}
	out.BriefCount = in.BriefCount + 1
	if in.BriefDue || (out.BriefCount >= in.BriefEvery && !in.SystemPrompt) {
		// A session that compacted its history (reported, or assumed every
		// BriefEvery turns) gets the brief back.
		before[2], out.BriefSent, out.BriefCount = brief, true, 0
	}
	if facts != seen {
		before[3] = delivery.FactsChangedPrefix + facts
	}
	out.Turn = delivery.FloorTurn(before[:], m, block)
	out.Text = out.Turn
	return nil
}

// stage is what a successful turn commits to its timeline: the arrival
// number the block was read at; the mentions it carried (its own and a
// coalesced list) that the channel did not hold yet (pushed after their
// turn, they are then not news; replayed mentions are placed by marks);
// the mentions it left out for a later turn (held), holes in that prefix;
// and a mark filling each earlier hole it accounted for (every one not
// held again: it was a candidate, or is gone). It is empty when the
// watermark would not change, so such a turn writes nothing.
func stage(wm *channel.Watermark, seq uint64, carried []channel.Known, held []channel.Mark) channel.Seen {
	s := channel.Seen{Seq: seq, Held: held}
	for _, k := range carried {
		if m := (channel.Mark{ID: k.ID}); k.ID != "" && k.Seq == 0 && (wm == nil || !slices.Contains(wm.Marks, m)) && !slices.Contains(s.Marks, m) {
			s.Marks = append(s.Marks, m)
		}
	}
	same := true
	for _, h := range held {
		same = same && wm != nil && slices.Contains(wm.Held, h)
	}
	if wm != nil {
		for _, h := range wm.Held {
			if !slices.Contains(held, h) {
				s.Marks = append(s.Marks, h)
			}
		}
	}
	if wm != nil && seq <= wm.Seq && len(s.Marks) == 0 && same {
		return channel.Seen{}
	}
	return s
}

// marks places what this delivery gave the session outside its own
// timeline's prefix. A thread's root is marked for the main timeline. A
// replay gives a new process every mention of the conversation, whatever
// timeline each lives in, in the version its turn answered: each is marked
// for its own timeline up to that version, and one the channel does not
// hold yet for the main timeline as "any unedited version": the main
// watermark's marks hold in every timeline, since nobody knows yet where it
// will live. The current timeline needs no mark: its prefix covers all.
func marks(main *channel.Watermark, thread string, root *channel.Mark, replayed []channel.Mark, known []channel.Known) map[string][]channel.Mark {
	out := map[string][]channel.Mark{}
	if root != nil {
		out[""] = append(out[""], *root)
	}
	for _, r := range replayed {
		i := slices.IndexFunc(known, func(k channel.Known) bool { return k.ID == r.ID })
		switch {
		case i < 0:
		case known[i].Seq == 0:
			if m := (channel.Mark{ID: r.ID}); main == nil || !slices.Contains(main.Marks, m) {
				out[""] = append(out[""], m)
			}
		case known[i].Thread != thread:
			out[known[i].Thread] = append(out[known[i].Thread], r)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// attachments lists what the prompt carries the attachments of, each
// message once: the mentions it carries (its own, a coalesced list; each
// unless the session saw it already, in an earlier block), the mentions a
// replay gives a new process, and the lines shown, but for a shown edit of
// a message the session saw: its attachments are its first push's, which
// went with that earlier sight.
func attachments(wm *channel.Watermark, view channel.View, sel delivery.Selection, carried []channel.Known, replayed []channel.Mark) []channel.Attachment {
	var out []channel.Attachment
	done := map[string]bool{}
	add := func(id string, atts []channel.Attachment) {
		if len(atts) == 0 || done[id] {
			return
		}
		done[id] = true
		out = append(out, atts...)
	}
	for _, mention := range carried {
		if mention.ID != "" && !(wm != nil && mention.Seq > 0 && wm.Covers(mention.ID, mention.Seq, false)) {
			add(mention.ID, view.Attached[mention.ID])
		}
	}
	for _, r := range replayed {
		add(r.ID, view.Attached[r.ID])
	}
	for _, m := range view.Rows {
		if !slices.Contains(sel.Edits, m.ID) {
			add(m.ID, m.Attachments)
		}
	}
	return out
}
