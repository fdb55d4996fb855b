package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/residentd/residentd/internal/channel"
)

func blob(content string) (channel.Attachment, map[string][]byte) {
	s := sha256.Sum256([]byte(content))
	h := hex.EncodeToString(s[:])
	return channel.Attachment{Name: "f.txt", Type: "text/plain", Size: int64(len(content)), SHA256: h}, map[string][]byte{h: []byte(content)}
}

func withAtt(m channel.Message, a channel.Attachment) channel.Message {
	m.Attachments = []channel.Attachment{a}
	return m
}

// keptFiles lists the attachments folder.
func keptFiles(t *testing.T, s *Store) []string {
	t.Helper()
	entries, err := os.ReadDir(s.AttachmentDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func refs(t *testing.T, s *Store, sum string) int {
	t.Helper()
	n, err := s.AttachmentRefs(sum)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// One content carried by two messages is kept once and counted twice; it
// goes with the last message that carries it, by delete or by retention;
// a duplicate push and an edit count nothing more.
func TestAttachmentsKeptOnceDroppedWithTheirLastMessage(t *testing.T) {
	s := openTest(t, Options{MaxChannelMessages: 3})
	a, data := blob("the log")
	if _, err := s.PutMessagesWith([]channel.Message{withAtt(msg("ch", "m1", 1, ""), a), withAtt(msg("ch", "m2", 2, ""), a)}, data); err != nil {
		t.Fatal(err)
	}
	if got := keptFiles(t, s); len(got) != 1 || got[0] != a.SHA256 || refs(t, s, a.SHA256) != 2 {
		t.Fatalf("kept %v refs %d: want one file counted twice", got, refs(t, s, a.SHA256))
	}
	dup := withAtt(msg("ch", "m1", 1, ""), a)
	edit := withAtt(msg("ch", "m2", 2, ""), a)
	edit.Body = "edited"
	if res, err := s.PutMessagesWith([]channel.Message{dup, edit}, data); err != nil || res.Duplicates != 1 || res.Edited != 1 {
		t.Fatalf("push %+v, %v", res, err)
	}
	if n := refs(t, s, a.SHA256); n != 2 {
		t.Fatalf("refs %d after a duplicate and an edit, want 2", n)
	}
	v, err := s.Unseen("ch", "", 0, nil, []string{"m1"}, func(c []channel.Candidate) []int { return []int{0, 1} })
	if err != nil {
		t.Fatal(err)
	}
	if p := filepath.Join(s.AttachmentDir(), a.SHA256); len(v.Rows[0].Attachments) != 1 || v.Rows[0].Attachments[0].Path != p || len(v.Attached["m1"]) != 1 || v.Attached["m1"][0].Path != p || v.Attached["m1"][0].Message != "m1" {
		t.Fatalf("rows %+v known %+v: want the attachment with its path %s", v.Rows, v.Known, p)
	}

	if err := s.DeleteMessage("ch", "m1"); err != nil {
		t.Fatal(err)
	}
	if got := keptFiles(t, s); len(got) != 1 || refs(t, s, a.SHA256) != 1 {
		t.Fatalf("after one delete: kept %v refs %d", got, refs(t, s, a.SHA256))
	}
	// Retention: three newer messages push m2 out.
	if _, err := s.PutMessages([]channel.Message{msg("ch", "m3", 3, ""), msg("ch", "m4", 4, ""), msg("ch", "m5", 5, "")}); err != nil {
		t.Fatal(err)
	}
	if has, _ := s.HasMessage("ch", "m2"); has {
		t.Fatal("retention kept m2")
	}
	if got := keptFiles(t, s); len(got) != 0 || refs(t, s, a.SHA256) != 0 {
		t.Fatalf("after retention dropped the last carrier: kept %v refs %d", got, refs(t, s, a.SHA256))
	}
}

// A refused push keeps no file, a message naming content the store has
// neither been given nor keeps is refused, and Open collects what a crash
// left behind.
func TestAttachmentsLeftBehindAreCollected(t *testing.T) {
	s := openTest(t, Options{})
	a, data := blob("kept")
	bad := withAtt(msg("ch", "m2", 2, ""), a)
	bad.AuthorKind = "robot"
	if _, err := s.PutMessagesWith([]channel.Message{withAtt(msg("ch", "m1", 1, ""), a), bad}, data); !errors.Is(err, channel.ErrInvalid) {
		t.Fatalf("push: %v, want invalid", err)
	}
	if _, err := s.PutMessagesWith([]channel.Message{withAtt(msg("ch", "m1", 1, ""), a)}, nil); !errors.Is(err, channel.ErrInvalidAttachment) {
		t.Fatalf("push without content: %v, want invalid attachment", err)
	}
	if got := keptFiles(t, s); len(got) != 0 {
		t.Fatalf("refused pushes kept %v", got)
	}
	if _, err := s.PutMessagesWith([]channel.Message{withAtt(msg("ch", "m1", 1, ""), a)}, data); err != nil {
		t.Fatal(err)
	}
	orphan, odata := blob("orphan")
	if err := s.writeBlobs(odata); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.AttachmentDir(), ".tmp-123"), []byte("cut"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, Options{})
	if got := keptFiles(t, s); len(got) != 1 || got[0] != a.SHA256 {
		t.Fatalf("after reopen kept %v, want only %s (not %s)", got, a.SHA256, orphan.SHA256)
	}
}
