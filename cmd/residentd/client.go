package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
)

// clientFlags adds --socket to a client command's flag set.
func clientFlags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	sock := fs.String("socket", os.Getenv("RESIDENTD_SOCKET"), "daemon socket (default $XDG_RUNTIME_DIR/residentd/residentd.sock)")
	return fs, sock
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func cmdMention(ctx context.Context, args []string, stdout io.Writer) error {
	fs, sock := clientFlags("mention")
	ch := fs.String("channel", "", "channel id (required)")
	binding := fs.String("binding", "b-builtin", "binding id")
	msg := fs.String("message", "", "message id of the mention")
	thread := fs.String("thread", "", "thread root id, if the mention is in a thread")
	run := fs.String("run", "", "run id (default: generated)")
	stream := fs.Bool("json", false, "print every event as a JSON line")
	if err := parse(fs, args); err != nil {
		return err
	}
	text := strings.Join(fs.Args(), " ")
	if *ch == "" || text == "" {
		return fmt.Errorf("%w: mention --channel ID [--binding ID] TEXT", errUsage)
	}
	req := apitype.TurnRequest{Channel: *ch, Binding: *binding, MessageID: *msg, RunID: *run, Text: text}
	if *thread != "" {
		req.ThreadRoot = thread
	}
	c := &client.Client{Socket: *sock}
	defer c.Close()
	done, err := c.Turn(ctx, req, func(ev apitype.Event) {
		switch {
		case *stream:
			json.NewEncoder(stdout).Encode(ev)
		case ev.Event == "started":
			fmt.Fprintf(stdout, "run %s: %s session %s (pid %d)\n", ev.RunID, ev.Shape, ev.Native, ev.Pid)
		case ev.Event == "update" && ev.Update != nil && ev.Update.Kind == "agent_message_chunk":
			fmt.Fprint(stdout, ev.Update.Text)
		}
	})
	if err != nil {
		return err
	}
	if !*stream {
		fmt.Fprintf(stdout, "\n[%s, stop %s, watermark %s]\n", done.Shape, done.StopReason, done.Watermark)
	}
	return nil
}

func cmdPush(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs, sock := clientFlags("push")
	if err := parse(fs, args); err != nil {
		return err
	}
	var msgs []apitype.Message
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var m apitype.Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return fmt.Errorf("stdin line %d: %w", n, err)
		}
		msgs = append(msgs, m)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	c := &client.Client{Socket: *sock}
	defer c.Close()
	res, err := c.PutMessages(ctx, msgs)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d messages, %d new\n", len(msgs), res.Added)
	return nil
}

func cmdSessions(ctx context.Context, args []string, stdout io.Writer) error {
	fs, sock := clientFlags("sessions")
	if err := parse(fs, args); err != nil {
		return err
	}
	c := &client.Client{Socket: *sock}
	defer c.Close()
	ss, err := c.Sessions(ctx)
	if err != nil {
		return err
	}
	return printJSON(stdout, ss)
}

func cmdStatus(ctx context.Context, args []string, stdout io.Writer) error {
	fs, sock := clientFlags("status")
	if err := parse(fs, args); err != nil {
		return err
	}
	c := &client.Client{Socket: *sock}
	defer c.Close()
	h, err := c.Health(ctx)
	if err != nil {
		return err
	}
	ss, err := c.Sessions(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "residentd %s (pid %d): %d/%d live, %d busy, %d queued\n\n", h.Version, h.Pid, h.Live, h.MaxLive, h.Busy, h.Queued)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tCOLD\tWARM\tRESTORED\tIDLE\tPID\tRSS\tNATIVE")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s/%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n", s.Channel, s.Binding, s.State,
			s.Turns["cold"], s.Turns["warm"], s.Turns["restored"],
			(time.Duration(s.IdleS) * time.Second).Round(time.Second), s.Pid, humanBytes(s.RSSBytes), s.Native)
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

func cmdFresh(ctx context.Context, args []string, stdout io.Writer) error {
	fs, sock := clientFlags("fresh")
	ch := fs.String("channel", "", "channel id (required)")
	binding := fs.String("binding", "b-builtin", "binding id")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *ch == "" {
		return fmt.Errorf("%w: fresh --channel ID [--binding ID]", errUsage)
	}
	c := &client.Client{Socket: *sock}
	defer c.Close()
	stopped, err := c.Fresh(ctx, *ch, *binding)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s/%s starts fresh (process stopped: %v)\n", *ch, *binding, stopped)
	return nil
}

func cmdCancel(ctx context.Context, args []string, stdout io.Writer) error {
	fs, sock := clientFlags("cancel")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: cancel RUN_ID", errUsage)
	}
	c := &client.Client{Socket: *sock}
	defer c.Close()
	if err := c.Cancel(ctx, fs.Arg(0)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cancelled %s\n", fs.Arg(0))
	return nil
}

func cmdHealth(ctx context.Context, args []string, stdout io.Writer) error {
	fs, sock := clientFlags("health")
	if err := parse(fs, args); err != nil {
		return err
	}
	c := &client.Client{Socket: *sock}
	defer c.Close()
	h, err := c.Health(ctx)
	if err != nil {
		return err
	}
	return printJSON(stdout, h)
}

func cmdLogLevel(ctx context.Context, args []string, stdout io.Writer) error {
	fs, sock := clientFlags("log-level")
	if err := parse(fs, args); err != nil {
		return err
	}
	c := &client.Client{Socket: *sock}
	defer c.Close()
	if fs.NArg() > 1 {
		return fmt.Errorf("%w: log-level [debug|info|warn|error]", errUsage)
	}
	if fs.NArg() == 1 {
		if err := c.SetLogLevel(ctx, fs.Arg(0)); err != nil {
			return err
		}
	}
	level, err := c.LogLevel(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, level)
	return nil
}
