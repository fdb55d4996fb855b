package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/agent"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// Attachments through the socket: pushed by path or inline, refused at
// push, and what the built-in agent was sent for them, read from its
// record of every prompt.

// prompted is one session/prompt the built-in agent recorded.
type prompted struct {
	Prompt string
	Blocks []agent.Block
}

// attachEnv is an env whose built-in agent runs with flags and records
// every prompt, with an attachments folder (returned) under its state
// directory.
func attachEnv(t *testing.T, flags []string, tweak ...func(*config.Config)) (e *env, folder, state string, prompts func() []prompted) {
	t.Helper()
	var rec string
	e = newEnv(t, append([]func(*config.Config){func(c *config.Config) {
		rec = filepath.Join(c.StateDir, "record.jsonl")
		c.Bindings[0].Args = append(append(c.Bindings[0].Args, "--record", rec), flags...)
		folder, state = filepath.Join(c.StateDir, "att"), c.StateDir
		if err := os.Mkdir(folder, 0o700); err != nil {
			t.Fatal(err)
		}
		c.Attachments.Dir = folder
	}}, tweak...)...)
	return e, folder, state, func() []prompted {
		t.Helper()
		return testkit.Records[prompted](t, rec, "session/prompt")
	}
}

// pngBytes is a real w×w PNG.
func pngBytes(t *testing.T, w int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, w))
	for i := range w {
		img.Set(i, i, color.RGBA{R: 200, A: 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func sum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

func attached(id, body string, sec int, atts ...apitype.Attachment) apitype.Message {
	m := line(id, body, sec)
	m.Attachments = atts
	return m
}

// kept is where the daemon keeps content sum of the store under state.
func kept(state, sum string) string {
	return filepath.Join(state, "residentd.db.attachments", sum)
}

// An image pushed by path reaches an agent that takes images as an image
// block of the very bytes, with a line naming it; the next turn does not
// send it again.
func TestAttachedImageReachesAnImageAgent(t *testing.T) {
	e, folder, state, prompts := attachEnv(t, []string{"--image"})
	img := pngBytes(t, 8)
	if err := os.WriteFile(filepath.Join(folder, "shot.png"), img, 0o600); err != nil {
		t.Fatal(err)
	}
	e.push(t, attached("q1", "@agent what is wrong in this screenshot?", 1, apitype.Attachment{Type: "image/png", Path: "shot.png"}))
	e.ask(t, "q1")
	p := prompts()
	if len(p) != 1 || len(p[0].Blocks) != 1 {
		t.Fatalf("prompts %+v: want one with one image block", p)
	}
	b := p[0].Blocks[0]
	if b.Type != "image" || b.MimeType != "image/png" || b.SHA256 != sum(img) || b.Size != len(img) {
		t.Fatalf("block %+v: want image/png of %d bytes, sha256 %s", b, len(img), sum(img))
	}
	if want := "Attachment of message q1 by aiko: shot.png (image/png, "; !strings.Contains(p[0].Prompt, want) {
		t.Fatalf("prompt lacks %q:\n%s", want, p[0].Prompt)
	}
	if got, err := os.ReadFile(kept(state, sum(img))); err != nil || !bytes.Equal(got, img) {
		t.Fatalf("kept copy: %v (equal %v)", err, bytes.Equal(got, img))
	}

	e.push(t, line("q2", "@agent and now?", 2))
	e.ask(t, "q2")
	p = prompts()
	if len(p) != 2 || len(p[1].Blocks) != 0 || strings.Contains(p[1].Prompt, "Attachment of") {
		t.Fatalf("second turn sent the attachment again: %+v", p[len(p)-1])
	}
}

// An agent that takes no images gets a line naming the kept file's path
// and type instead, once; an image on a context line goes with that line,
// and an edit of a line the session saw does not send it again.
func TestAttachedImageWithoutImageSupportIsAPathLine(t *testing.T) {
	e, _, state, prompts := attachEnv(t, nil)
	img := pngBytes(t, 4)
	e.push(t, attached("m1", "the chart", 1, apitype.Attachment{Name: "chart.png", Type: "image/png", Data: base64.StdEncoding.EncodeToString(img)}))
	e.push(t, line("q1", "@agent see the chart above", 2))
	e.ask(t, "q1")
	p := prompts()
	if len(p) != 1 || len(p[0].Blocks) != 0 {
		t.Fatalf("prompts %+v: want one with no content block", p)
	}
	want := "Attachment of message m1 by aiko: chart.png (image/png, " + strconv.Itoa(len(img)) + " bytes) at " + kept(state, sum(img))
	if !strings.Contains(p[0].Prompt, want) {
		t.Fatalf("prompt lacks the path line %q:\n%s", want, p[0].Prompt)
	}

	e.push(t, attached("m1", "the chart (fixed axis)", 1, apitype.Attachment{Name: "chart.png", Type: "image/png", Data: base64.StdEncoding.EncodeToString(img)}))
	e.push(t, line("q2", "@agent and now?", 3))
	done := e.ask(t, "q2")
	p = prompts()
	if done.Context.Edited != 1 {
		t.Fatalf("context %+v: want the edit of m1 shown", done.Context)
	}
	if strings.Contains(p[1].Prompt, "Attachment of") {
		t.Fatalf("the edit sent the attachment again:\n%s", p[1].Prompt)
	}
}

// With embedded context a text file is embedded as text and a PDF as a
// blob; without it both go as links to the kept files.
func TestAttachedFilesAsResources(t *testing.T) {
	text := []byte("panic: refund_spec.rb:42 flaky\n")
	pdf := []byte("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n")
	atts := []apitype.Attachment{
		{Name: "ci.log", Type: "text/plain", Data: base64.StdEncoding.EncodeToString(text)},
		{Name: "spec.pdf", Type: "application/pdf", Data: base64.StdEncoding.EncodeToString(pdf)},
	}
	for _, embedded := range []bool{true, false} {
		t.Run(map[bool]string{true: "embedded", false: "links"}[embedded], func(t *testing.T) {
			var flags []string
			if embedded {
				flags = []string{"--embedded-context"}
			}
			e, _, state, prompts := attachEnv(t, flags)
			e.push(t, attached("q1", "@agent the log and the spec", 1, atts...))
			e.ask(t, "q1")
			p := prompts()
			if len(p) != 1 || len(p[0].Blocks) != 2 {
				t.Fatalf("prompts %+v: want one with two blocks", p)
			}
			for i, data := range [][]byte{text, pdf} {
				b := p[0].Blocks[i]
				uri := "file://" + kept(state, sum(data))
				switch {
				case embedded && (b.Type != "resource" || b.SHA256 != sum(data) || b.URI != uri || b.MimeType != atts[i].Type):
					t.Errorf("block %d %+v: want a resource of %s at %s", i, b, atts[i].Name, uri)
				case !embedded && (b.Type != "resource_link" || b.URI != uri || b.Name != atts[i].Name || b.Size != len(data)):
					t.Errorf("block %d %+v: want a resource_link to %s", i, b, uri)
				}
			}
		})
	}
}

// Every refused attachment refuses its batch with invalid_attachment
// naming it, and nothing of the batch is written: not the other message,
// not a kept file.
func TestRefusedAttachmentsLeaveTheBatchUnwritten(t *testing.T) {
	e, folder, state, _ := attachEnv(t, nil, func(c *config.Config) { c.Attachments.MaxBytes = 1024 })
	img := pngBytes(t, 2)
	big := bytes.Repeat([]byte("x"), 2048)
	outside := filepath.Join(state, "outside.txt")
	for name, data := range map[string][]byte{"big.txt": big, "shot.png": img, "note.txt": []byte("hello")} {
		if err := os.WriteFile(filepath.Join(folder, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(folder, "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(folder, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	good := apitype.Attachment{Type: "text/plain", Path: "note.txt"}
	b64 := base64.StdEncoding.EncodeToString
	cases := []struct {
		name string
		bad  apitype.Attachment
		msg  string
	}{
		{"oversized by path", apitype.Attachment{Type: "text/plain", Path: "big.txt"}, "2048 bytes, the limit is 1024"},
		{"oversized inline", apitype.Attachment{Name: "big", Type: "text/plain", Data: b64(big)}, "the limit is 1024"},
		{"missing file", apitype.Attachment{Type: "text/plain", Path: "gone.txt"}, "unreadable"},
		{"a folder", apitype.Attachment{Type: "text/plain", Path: "sub"}, "not a regular file"},
		{"dot-dot outside", apitype.Attachment{Type: "text/plain", Path: "../outside.txt"}, "outside the attachments folder"},
		{"absolute outside", apitype.Attachment{Type: "text/plain", Path: outside}, "outside the attachments folder"},
		{"symlink outside", apitype.Attachment{Type: "text/plain", Path: "link.txt"}, "outside the attachments folder"},
		{"image declared as text", apitype.Attachment{Type: "text/plain", Path: "shot.png"}, "declared type text/plain, but the content is image/png"},
		{"text declared as image", apitype.Attachment{Type: "image/png", Path: "note.txt"}, "declared type image/png, but the content is text/plain"},
		{"png declared as jpeg", apitype.Attachment{Name: "x.jpg", Type: "image/jpeg", Data: b64(img)}, "declared type image/jpeg, but the content is image/png"},
		{"binary declared as text", apitype.Attachment{Name: "x.txt", Type: "text/plain", Data: b64([]byte{0xff, 0xfe, 0x00, 0x01})}, "not UTF-8 text"},
		{"bad base64", apitype.Attachment{Name: "x", Type: "text/plain", Data: "not base64!"}, "not standard base64"},
		{"path and data", apitype.Attachment{Type: "text/plain", Path: "note.txt", Data: b64([]byte("x"))}, "not both"},
		{"no type", apitype.Attachment{Path: "note.txt"}, "type is required"},
		{"not a media type", apitype.Attachment{Type: "png", Path: "shot.png"}, `type "png" is not a media type such as image/png`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.c.PutMessages(context.Background(), []apitype.Message{
				line("ok", "fine", 1),
				attached("m1", "two files", 2, good, c.bad),
			})
			var ae *client.Error
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != apitype.CodeInvalidAttachment {
				t.Fatalf("push: %v; want 400 %s", err, apitype.CodeInvalidAttachment)
			}
			for _, want := range []string{`messages[1] (id "m1") attachments[1]`, c.msg, "nothing of the batch was written"} {
				if !strings.Contains(ae.Message, want) {
					t.Errorf("message %q lacks %q", ae.Message, want)
				}
			}
			for _, id := range []string{"ok", "m1"} {
				if has, err := e.inbox.HasMessage("ch", id); err != nil || has {
					t.Errorf("message %s written (%v, %v)", id, has, err)
				}
			}
			if entries, _ := os.ReadDir(filepath.Join(state, "residentd.db.attachments")); len(entries) != 0 {
				t.Errorf("kept files after a refused push: %v", entries)
			}
		})
	}
}
