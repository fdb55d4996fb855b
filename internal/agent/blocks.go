package agent

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	acp "github.com/coder/acp-go-sdk"
)

// Block is a prompt's content block other than text, as --record writes
// it: its type, media type, URI and name, and the size and SHA-256 of its
// content (decoded; none for a link), so a test can tell what arrived.
type Block struct {
	Type     string `json:"type"`
	MimeType string `json:"mime_type,omitempty"`
	URI      string `json:"uri,omitempty"`
	Name     string `json:"name,omitempty"`
	Size     int    `json:"size,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
}

// blocks describes the prompt's blocks other than text, refusing, as a
// strict agent would, a kind it did not advertise (an image without
// --image, an embedded resource without --embedded-context, audio).
func (b *builtin) blocks(prompt []acp.ContentBlock) ([]Block, error) {
	var out []Block
	refuse := func(kind, flag string) error {
		return &acp.RequestError{Code: -32602, Message: fmt.Sprintf("builtin: prompt holds %s content, which this agent did not advertise (%s)", kind, flag)}
	}
	for _, c := range prompt {
		switch {
		case c.Image != nil:
			if !b.opts.image {
				return nil, refuse("image", "--image")
			}
			blk := Block{Type: "image", MimeType: c.Image.MimeType}
			if c.Image.Uri != nil {
				blk.URI = *c.Image.Uri
			}
			blk.content(c.Image.Data, true)
			out = append(out, blk)
		case c.Resource != nil:
			if !b.opts.embedded {
				return nil, refuse("embedded resource", "--embedded-context")
			}
			blk := Block{Type: "resource"}
			switch r := c.Resource.Resource; {
			case r.TextResourceContents != nil:
				blk.URI, blk.MimeType = r.TextResourceContents.Uri, deref(r.TextResourceContents.MimeType)
				blk.content(r.TextResourceContents.Text, false)
			case r.BlobResourceContents != nil:
				blk.URI, blk.MimeType = r.BlobResourceContents.Uri, deref(r.BlobResourceContents.MimeType)
				blk.content(r.BlobResourceContents.Blob, true)
			}
			out = append(out, blk)
		case c.ResourceLink != nil:
			l := c.ResourceLink
			blk := Block{Type: "resource_link", URI: l.Uri, Name: l.Name, MimeType: deref(l.MimeType)}
			if l.Size != nil {
				blk.Size = *l.Size
			}
			out = append(out, blk)
		case c.Audio != nil:
			return nil, refuse("audio", "no flag: it never takes audio")
		}
	}
	return out, nil
}

// content sets the block's size and hash from its content, base64 when b64.
func (blk *Block) content(s string, b64 bool) {
	data := []byte(s)
	if b64 {
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			blk.SHA256 = "invalid base64"
			return
		}
		data = d
	}
	sum := sha256.Sum256(data)
	blk.Size, blk.SHA256 = len(data), hex.EncodeToString(sum[:])
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
