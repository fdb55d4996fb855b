package inbox

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/regfile"
)

// Push is one pushed message and the attachments it carries as pushed.
type Push struct {
	Message     channel.Message
	Attachments []apitype.Attachment
}

// resolve reads, checks and hashes the attachments of a batch: every
// message gets its channel.Attachment list, blobs the content by hash. The
// first attachment refused ends it with an error naming it
// (messages[i].attachments[j]) that wraps channel.ErrInvalidAttachment.
func resolve(cfg config.Attachments, batch []Push) ([]channel.Message, map[string][]byte, error) {
	max := cfg.MaxBytes
	if max <= 0 {
		max = config.DefaultAttachmentMaxBytes
	}
	if err := count(cfg, batch); err != nil {
		return nil, nil, err
	}
	msgs := make([]channel.Message, len(batch))
	var blobs map[string][]byte
	for i, p := range batch {
		m := p.Message
		m.Attachments = nil
		for j, a := range p.Attachments {
			name := a.Name
			if name == "" {
				name = filepath.Base(a.Path)
			}
			data, err := read(cfg.Dir, max, a)
			if err == nil {
				err = checkType(a.Type, data)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("%w: messages[%d] (id %q) attachments[%d] (%q): %w; nothing of the batch was written", channel.ErrInvalidAttachment, i, m.ID, j, name, err)
			}
			sum := sha256.Sum256(data)
			h := hex.EncodeToString(sum[:])
			if blobs == nil {
				blobs = map[string][]byte{}
			}
			blobs[h] = data
			mt, _, _ := mime.ParseMediaType(a.Type)
			m.Attachments = append(m.Attachments, channel.Attachment{Name: name, Type: mt, Size: int64(len(data)), SHA256: h})
		}
		msgs[i] = m
	}
	return msgs, blobs, nil
}

// count refuses a batch that carries more attachments than
// attachments.max_per_message allows on one message or .max_per_push on
// the whole batch, before any is read: each is read, sniffed and hashed
// while the push waits.
func count(cfg config.Attachments, batch []Push) error {
	perMessage, perPush := cfg.MaxPerMessage, cfg.MaxPerPush
	if perMessage <= 0 {
		perMessage = config.DefaultAttachmentsPerMessage
	}
	if perPush <= 0 {
		perPush = config.DefaultAttachmentsPerPush
	}
	total := 0
	for i, p := range batch {
		n := len(p.Attachments)
		if n > perMessage {
			return fmt.Errorf("%w: messages[%d] (id %q) carries %d attachments, the limit is %d per message (attachments.max_per_message); nothing of the batch was written", channel.ErrInvalidAttachment, i, p.Message.ID, n, perMessage)
		}
		total += n
	}
	if total > perPush {
		return fmt.Errorf("%w: the push carries %d attachments over %d messages, the limit is %d per push (attachments.max_per_push): push them in smaller batches; nothing of the batch was written", channel.ErrInvalidAttachment, total, len(batch), perPush)
	}
	return nil
}

// read returns an attachment's content: a file inside dir, or inline data.
func read(dir string, max int64, a apitype.Attachment) ([]byte, error) {
	switch {
	case a.Type == "":
		return nil, errors.New("type is required (its media type, such as image/png or text/plain)")
	case a.Path != "" && a.Data != "":
		return nil, errors.New("give path or data, not both")
	case a.Path == "" && a.Data == "":
		return nil, errors.New("give path (a file in the attachments folder) or data (base64)")
	case a.Data != "":
		if n := int64(base64.StdEncoding.DecodedLen(len(a.Data))); n > max+2 {
			return nil, fmt.Errorf("about %d bytes, the limit is %d (attachments.max_bytes)", n, max)
		}
		data, err := base64.StdEncoding.DecodeString(a.Data)
		if err != nil {
			return nil, fmt.Errorf("data is not standard base64: %w", err)
		}
		if int64(len(data)) > max {
			return nil, fmt.Errorf("%d bytes, the limit is %d (attachments.max_bytes)", len(data), max)
		}
		return data, nil
	}
	path, err := inside(dir, a.Path)
	if err != nil {
		return nil, err
	}
	// inside resolved every link: one swapped in since is refused, and so
	// is anything but a regular file (a FIFO would block the open).
	f, fi, err := regfile.OpenNoFollow(path)
	if errors.Is(err, regfile.ErrNotRegular) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("unreadable: %w", err)
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, fmt.Errorf("%d bytes, the limit is %d (attachments.max_bytes)", fi.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("unreadable: %w", err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("more than %d bytes, the limit (attachments.max_bytes)", max)
	}
	return data, nil
}

// inside resolves p (relative to dir, or absolute) with its symlinks and
// refuses it unless it lies inside dir.
func inside(dir, p string) (string, error) {
	if dir == "" {
		return "", errors.New("no attachments folder is configured (attachments.dir): send the content inline as data")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("attachments folder %q: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		// A path that does not exist may still be outside: say which.
		if rel, rerr := filepath.Rel(dir, filepath.Clean(p)); rerr == nil && (rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator))) {
			return "", fmt.Errorf("path %q is outside the attachments folder %q", p, dir)
		}
		return "", fmt.Errorf("unreadable: %w", err)
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q is outside the attachments folder %q", p, dir)
	}
	return real, nil
}

// checkType refuses content that is not what its declared media type
// says, as far as sniffing can tell: an image or a PDF must sniff as that
// very type (and content that sniffs as one must say so), text must be
// UTF-8. Other types (archives, octet streams) are taken as declared.
func checkType(declared string, data []byte) error {
	mt, _, err := mime.ParseMediaType(declared)
	if err == nil && !strings.Contains(mt, "/") {
		err = errors.New("want type/subtype")
	}
	if err != nil {
		return fmt.Errorf("type %q is not a media type such as image/png: %w", declared, err)
	}
	sniffed, _, _ := mime.ParseMediaType(http.DetectContentType(data))
	strict := func(t string) bool { return strings.HasPrefix(t, "image/") || t == "application/pdf" }
	switch {
	case strict(mt) || strict(sniffed):
		if mt != sniffed {
			return fmt.Errorf("declared type %s, but the content is %s", mt, sniffed)
		}
	case textual(mt):
		if !utf8.Valid(data) {
			return fmt.Errorf("declared type %s, but the content is not UTF-8 text (it reads as %s)", mt, sniffed)
		}
	}
	return nil
}

// textual reports whether media type mt is text an agent reads as such.
func textual(mt string) bool {
	switch {
	case strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/yaml", "application/x-yaml", "application/toml", "application/javascript", "application/x-sh":
		return true
	}
	return false
}
