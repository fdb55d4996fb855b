// Package sim reproduces the token measurement of the spec through the real
// daemon: it generates a deterministic channel, plays it to one binding per
// strategy, and counts what the agent actually received.
package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/residentd/residentd/internal/channel"
)

// ChannelID is the channel every strategy is played in.
const ChannelID = "ch-backend"

// AgentHandle is the agent's handle in the channel and in every binding.
const AgentHandle = "@claude"

// ErrParams classifies channel parameters that cannot produce a channel.
var ErrParams = errors.New("sim: bad channel parameters")

// ChannelParams shape the generated channel.
type ChannelParams struct {
	Seed      uint64
	Messages  int // all messages, agent replies and mentions included
	People    int
	Mentions  int
	Long      int // log pastes longer than MaxChars
	GapMin    int // messages between two mentions
	GapMax    int
	GapMedian int
	MaxChars  int // the render's body cut; long pastes exceed it
}

// DefaultChannelParams are the spec's numbers.
func DefaultChannelParams() ChannelParams {
	return ChannelParams{Seed: 1, Messages: 200, People: 5, Mentions: 30, Long: 8, GapMin: 1, GapMax: 21, GapMedian: 4, MaxChars: 600}
}

// Message is one generated channel message, as --write-channel writes it.
type Message struct {
	ID            string    `json:"id"`
	Author        string    `json:"author"`
	AuthorKind    string    `json:"author_kind"`
	CreatedAt     time.Time `json:"created_at"`
	Body          string    `json:"body"`
	MentionsAgent bool      `json:"mentions_agent"`
}

// ToChannel returns m as a message of channel ch.
func (m Message) ToChannel(ch string) channel.Message {
	return channel.Message{ID: m.ID, Channel: ch, Author: m.Author, AuthorKind: m.AuthorKind, CreatedAt: m.CreatedAt, Body: m.Body}
}

var people = []string{"aiko", "bruno", "carla", "dmitri", "esi", "farid", "gwen", "hana"}

var topics = []string{
	"the refund spec", "the webhook retries", "the cache key", "the ja locale pages", "the billing export",
	"the nightly migration", "the rate limiter", "the login redirect", "the search index", "the invoice PDF",
	"the staging deploy", "the payments queue", "the audit log", "the feature flag for checkout", "the CSV import",
}

var chatter = []string{
	"I think %s needs another look before Friday",
	"anyone touched %s since Monday? it behaves differently now",
	"pushed a small fix for %s, tests are green locally",
	"%s is failing again on CI, same error as yesterday",
	"can we pair on %s after lunch?",
	"reverted my change to %s, it broke the staging build",
	"the PR for %s is up, reviews welcome",
	"%s: I added a metric so we can see how often it happens",
	"does %s run in the same transaction as the order update?",
	"I'll take %s, assigning the ticket to myself",
	"note for later: %s still logs at debug level in production",
	"%s looks fine on my machine, maybe it is the runner",
}

var questions = []string{
	"why is %s flaky? look at the last runs",
	"find where %s is configured",
	"can you check whether %s has a test for the empty case?",
	"what changed in %s this week?",
	"is %s safe to retry?",
	"summarise the failures of %s from the paste above",
	"propose a fix for %s, keep it small",
}

var replies = []string{
	"Looked at %s: the failure comes from a shared fixture that is not reset between examples; resetting it in the before hook fixes it locally.",
	"%s is set in config/settings.yml and overridden per environment in deploy/values; production uses the override.",
	"There is no test for the empty case of %s yet; I added one in the spec file and it passes.",
	"Three commits touched %s this week; the last one changed the timeout from 5s to 2s, which matches when the errors started.",
	"%s is idempotent on the server side (keyed by request id), so a retry is safe.",
}

// distinctTries is how many random draws a line gets to start unlike every
// earlier line before Generate numbers it instead; without the bound a
// channel longer than the templates' variety would never finish.
const distinctTries = 64

// Generate builds the channel for p deterministically: the same parameters
// give the same messages.
func Generate(p ChannelParams) ([]Message, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))
	gaps, lead, err := layout(rng, p)
	if err != nil {
		return nil, err
	}
	// kinds: 'm' mention, 'r' agent reply, 'u' user line.
	kinds := make([]byte, 0, p.Messages)
	for range lead {
		kinds = append(kinds, 'u')
	}
	for i := 0; i < p.Mentions; i++ {
		kinds = append(kinds, 'm')
		n := p.Messages - len(kinds) // the tail after the last mention
		if i < len(gaps) {
			n = gaps[i]
		}
		for j := range n {
			if j == 0 {
				kinds = append(kinds, 'r')
			} else {
				kinds = append(kinds, 'u')
			}
		}
	}
	var users []int
	for i, k := range kinds {
		if k == 'u' {
			users = append(users, i)
		}
	}
	if len(users) < p.Long {
		return nil, fmt.Errorf("%w: %d long pastes asked for but only %d user lines", ErrParams, p.Long, len(users))
	}
	long := map[int]bool{}
	for _, i := range rng.Perm(len(users))[:p.Long] {
		long[users[i]] = true
	}

	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	msgs := make([]Message, 0, p.Messages)
	lastTopic := topics[0]
	for i, k := range kinds {
		at = at.Add(time.Duration(20+rng.IntN(280)) * time.Second)
		m := Message{ID: fmt.Sprintf("m%03d", i+1), CreatedAt: at, AuthorKind: channel.KindUser}
		for try := 0; ; try++ {
			topic := topics[rng.IntN(len(topics))]
			switch {
			case k == 'm':
				m.Author = people[rng.IntN(p.People)]
				m.Body = AgentHandle + " " + fmt.Sprintf(questions[rng.IntN(len(questions))], topic)
				m.MentionsAgent = true
				lastTopic = topic
			case k == 'r':
				m.Author, m.AuthorKind = AgentHandle, channel.KindAgent
				m.Body = fmt.Sprintf(replies[rng.IntN(len(replies))], capitalize(lastTopic))
			case long[i]:
				m.Author = people[rng.IntN(p.People)]
				m.Body = logPaste(rng, topic, p.MaxChars)
			default:
				m.Author = people[rng.IntN(p.People)]
				m.Body = fmt.Sprintf(chatter[rng.IntN(len(chatter))], topic)
			}
			if try > 0 {
				m.Body += fmt.Sprintf(" (#%d)", 100+rng.IntN(900))
			}
			if try >= distinctTries {
				// The templates ran out of lines that start differently (a
				// long channel): number the line where its key sees it.
				m.Body = fmt.Sprintf("(%s) %s", m.ID, m.Body)
			}
			if key := matchKey(m.Body); !seen[key] {
				seen[key] = true
				break
			}
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func (p ChannelParams) check() error {
	switch {
	case p.Messages <= 0 || p.Mentions <= 0:
		return fmt.Errorf("%w: messages (%d) and mentions (%d) must be positive", ErrParams, p.Messages, p.Mentions)
	case p.People < 1 || p.People > len(people):
		return fmt.Errorf("%w: people must be 1..%d, got %d", ErrParams, len(people), p.People)
	case p.GapMin < 1 || p.GapMin > p.GapMedian || p.GapMedian > p.GapMax:
		return fmt.Errorf("%w: need 1 <= gap-min (%d) <= gap-median (%d) <= gap-max (%d)", ErrParams, p.GapMin, p.GapMedian, p.GapMax)
	case p.Long < 0 || p.MaxChars <= 0:
		return fmt.Errorf("%w: long (%d) must not be negative and max-chars (%d) must be positive", ErrParams, p.Long, p.MaxChars)
	}
	return nil
}

// layout draws the gaps between consecutive mentions (min, max and median
// as asked, bursts in between) and the lead before the first mention.
func layout(rng *rand.Rand, p ChannelParams) (gaps []int, lead int, err error) {
	n := p.Mentions - 1
	budget := p.Messages - p.Mentions
	if n == 0 {
		return nil, budget / 2, nil
	}
	mid := n / 2
	sorted := make([]int, n)
	for i := range sorted {
		switch {
		case i == 0:
			sorted[i] = p.GapMin
		case i == n-1:
			sorted[i] = p.GapMax
		case i < mid:
			sorted[i] = p.GapMin + rng.IntN(p.GapMedian-p.GapMin+1)
		case i == mid:
			sorted[i] = p.GapMedian
		default:
			// Bursts: most gaps stay near the median, a few run long.
			u := rng.Float64()
			sorted[i] = p.GapMedian + int(float64(p.GapMax-p.GapMedian)*u*u*u)
		}
	}
	if n == 1 {
		sorted[0] = p.GapMedian
	}
	slices.Sort(sorted)
	sum := 0
	for _, g := range sorted {
		sum += g
	}
	// Shrink the upper half (never the maximum) until the channel fits.
	for i := n - 2; sum > budget && i > mid; {
		if sorted[i] > p.GapMedian {
			sorted[i]--
			sum--
			continue
		}
		i--
	}
	if sum > budget {
		return nil, 0, fmt.Errorf("%w: %d mentions with gaps of median %d and max %d need more than %d messages", ErrParams, p.Mentions, p.GapMedian, p.GapMax, p.Messages)
	}
	gaps = make([]int, n)
	for i, j := range rng.Perm(n) {
		gaps[i] = sorted[j]
	}
	rest := budget - sum
	return gaps, (rest + 1) / 2, nil
}

func logPaste(rng *rand.Rand, topic string, maxChars int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CI run #%d failed on %s, log below:\n", 4000+rng.IntN(6000), topic)
	want := maxChars + 100 + rng.IntN(maxChars*2)
	sec := rng.IntN(50)
	for b.Len() < want {
		sec += 1 + rng.IntN(3)
		switch rng.IntN(4) {
		case 0:
			fmt.Fprintf(&b, "2026-03-02T09:%02d:%02dZ ERROR spec/%s_spec.rb:%d expected 200, got 502 (upstream timeout after 2000ms)\n", sec/60%60, sec%60, strings.ReplaceAll(strings.TrimPrefix(topic, "the "), " ", "_"), 10+rng.IntN(300))
		case 1:
			fmt.Fprintf(&b, "2026-03-02T09:%02d:%02dZ WARN  retrying request id=%08x attempt=%d\n", sec/60%60, sec%60, rng.Uint32(), 1+rng.IntN(5))
		case 2:
			fmt.Fprintf(&b, "    at app/services/%s.rb:%d:in `call'\n", strings.ReplaceAll(strings.TrimPrefix(topic, "the "), " ", "_"), 5+rng.IntN(200))
		default:
			fmt.Fprintf(&b, "2026-03-02T09:%02d:%02dZ INFO  worker=%d queue=default latency_ms=%d\n", sec/60%60, sec%60, rng.IntN(8), rng.IntN(4000))
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// matchKey is the part of a body that identifies its line in a prompt: the
// start of its first line, which no render changes.
func matchKey(body string) string {
	first, _, _ := strings.Cut(body, "\n")
	if utf8.RuneCountInString(first) > 48 {
		first = string([]rune(first)[:48])
	}
	return first
}

// Stats describes a channel the way the source's run printed it.
type Stats struct {
	Messages, Mentions, Long, AgentPosts int
	GapMin, GapMedian, GapMax            int
}

// Describe computes s for msgs; maxChars decides what counts as long.
func Describe(msgs []Message, maxChars int) Stats {
	s := Stats{Messages: len(msgs)}
	var gaps []int
	last := -1
	for i, m := range msgs {
		if utf8.RuneCountInString(m.Body) > maxChars {
			s.Long++
		}
		if m.AuthorKind == channel.KindAgent {
			s.AgentPosts++
		}
		if m.MentionsAgent {
			s.Mentions++
			if last >= 0 {
				gaps = append(gaps, i-last-1)
			}
			last = i
		}
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		s.GapMin, s.GapMedian, s.GapMax = gaps[0], gaps[len(gaps)/2], gaps[len(gaps)-1]
	}
	return s
}

// WriteChannel writes msgs as JSON lines.
func WriteChannel(w io.Writer, msgs []Message) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, m := range msgs {
		if err := enc.Encode(m); err != nil {
			return fmt.Errorf("sim: write channel message %q: %w", m.ID, err)
		}
	}
	return nil
}

// ReadChannel reads JSON lines written by WriteChannel; messages must be in
// posting order with increasing created_at.
func ReadChannel(r io.Reader) ([]Message, error) {
	var msgs []Message
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), channel.MaxBodyBytes*2)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var m Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return nil, fmt.Errorf("sim: channel line %d: %w", n, err)
		}
		if m.ID == "" || m.CreatedAt.IsZero() {
			return nil, fmt.Errorf("sim: channel line %d: id and created_at are required", n)
		}
		if m.AuthorKind == "" {
			m.AuthorKind = channel.KindUser
		}
		if len(msgs) > 0 && !m.CreatedAt.After(msgs[len(msgs)-1].CreatedAt) {
			return nil, fmt.Errorf("sim: channel line %d (id %q): created_at must increase", n, m.ID)
		}
		msgs = append(msgs, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sim: read channel: %w", err)
	}
	return msgs, nil
}
