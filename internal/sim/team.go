package sim

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// TeamParams shape a team's working days: each channel's bursts of
// mentions start at random (exponential gaps of working time, so a
// channel's mean gap holds whatever the calendar), a burst holds BurstMin
// to BurstMax mentions MentionGapMin to MentionGapMax apart, and no
// mention falls outside the working hours or in the lunch break.
type TeamParams struct {
	MeanGaps                     []time.Duration // one channel each: the mean working time between two of its bursts' starts
	BurstMin, BurstMax           int
	MentionGapMin, MentionGapMax time.Duration
	DayStart, LunchStart         time.Duration // since midnight
	LunchEnd, DayEnd             time.Duration
	Days                         int
	First                        time.Time // midnight of the first day
	Binding                      string
}

// DefaultTeamParams is the default team day, twice: 8 channels whose
// bursts start with mean gaps of 12, 15, 40, 45, 60, 180, 240 and 300
// minutes, bursts of 1–4 mentions 0.5–4 minutes apart, work from 08:00 to
// 19:00 with no mentions from 12:00 to 13:00, one binding.
func DefaultTeamParams() TeamParams {
	var gaps []time.Duration
	for _, m := range []int{12, 15, 40, 45, 60, 180, 240, 300} {
		gaps = append(gaps, time.Duration(m)*time.Minute)
	}
	return TeamParams{
		MeanGaps: gaps, BurstMin: 1, BurstMax: 4, MentionGapMin: 30 * time.Second, MentionGapMax: 4 * time.Minute,
		DayStart: 8 * time.Hour, LunchStart: 12 * time.Hour, LunchEnd: 13 * time.Hour, DayEnd: 19 * time.Hour,
		Days: 2, First: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Binding: "b-claude",
	}
}

// Mention is one mention of a team trace: when, in which channel, for
// which binding.
type Mention struct {
	At      time.Time
	Channel string
	Binding string
}

// working is the working time of one day.
func (p TeamParams) working() time.Duration {
	return p.LunchStart - p.DayStart + p.DayEnd - p.LunchEnd
}

// wall turns working time since the first day's start into a moment.
func (p TeamParams) wall(w time.Duration) time.Time {
	per := p.working()
	day := int(w / per)
	in := w % per
	at := p.DayStart + in
	if in >= p.LunchStart-p.DayStart {
		at = p.LunchEnd + in - (p.LunchStart - p.DayStart)
	}
	return p.First.AddDate(0, 0, day).Add(at)
}

// works says whether a mention may fall at t.
func (p TeamParams) works(t time.Time) bool {
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, t.Location())
	d := t.Sub(day)
	in := d >= p.DayStart && d < p.LunchStart || d >= p.LunchEnd && d < p.DayEnd
	return in && day.Before(p.First.AddDate(0, 0, p.Days))
}

// GenerateTeam draws the team's mentions for seed: the same seed, the
// same days. Each channel draws from a stream of its own.
func GenerateTeam(p TeamParams, seed uint64) ([]Mention, error) {
	if len(p.MeanGaps) == 0 || p.Days <= 0 || p.working() <= 0 || p.BurstMin < 1 || p.BurstMax < p.BurstMin ||
		p.MentionGapMin <= 0 || p.MentionGapMax < p.MentionGapMin {
		return nil, fmt.Errorf("%w: team parameters %+v", ErrParams, p)
	}
	var out []Mention
	total := p.working() * time.Duration(p.Days)
	for i, mean := range p.MeanGaps {
		if mean <= 0 {
			return nil, fmt.Errorf("%w: channel %d's mean gap %s", ErrParams, i+1, mean)
		}
		rng := rand.New(rand.NewPCG(seed, uint64(i+1)*0x9e3779b97f4a7c15))
		ch := fmt.Sprintf("ch-%d", i+1)
		for w := time.Duration(0); ; {
			w += time.Duration(rng.ExpFloat64() * float64(mean))
			if w >= total {
				break
			}
			at := p.wall(w)
			n := p.BurstMin + rng.IntN(p.BurstMax-p.BurstMin+1)
			for j := range n {
				if j > 0 {
					at = at.Add(p.MentionGapMin + time.Duration(rng.Int64N(int64(p.MentionGapMax-p.MentionGapMin)+1)))
				}
				if p.works(at) {
					out = append(out, Mention{At: at.Round(time.Millisecond), Channel: ch, Binding: p.Binding})
				}
			}
		}
	}
	sortMentions(out)
	return out, nil
}

func sortMentions(ms []Mention) {
	sort.SliceStable(ms, func(i, j int) bool {
		if !ms[i].At.Equal(ms[j].At) {
			return ms[i].At.Before(ms[j].At)
		}
		return ms[i].Channel < ms[j].Channel
	})
}

// The trace format, one mention a line:
//
//	2026-12-01T08:14:03.250Z ch-1 b-claude
//
// a moment (RFC 3339, any zone), the channel and, optionally, the binding
// (the default team's binding when left out), separated by spaces or
// tabs. Blank lines and lines starting with # are skipped; the lines need
// not be in order.

// ReadTrace reads a team trace.
func ReadTrace(r io.Reader, binding string) ([]Mention, error) {
	var out []Mention
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("sim: trace line %d: want TIME CHANNEL [BINDING], got %q", n, line)
		}
		at, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			return nil, fmt.Errorf("sim: trace line %d: %w", n, err)
		}
		m := Mention{At: at, Channel: f[1], Binding: binding}
		if len(f) == 3 {
			m.Binding = f[2]
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sim: read trace: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sim: the trace holds no mention")
	}
	sortMentions(out)
	return out, nil
}

// WriteTrace writes ms in the trace format.
func WriteTrace(w io.Writer, ms []Mention) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "# residentd sim --team trace: TIME CHANNEL BINDING, one mention a line")
	for _, m := range ms {
		fmt.Fprintf(bw, "%s %s %s\n", m.At.UTC().Format(time.RFC3339Nano), m.Channel, m.Binding)
	}
	return bw.Flush()
}
