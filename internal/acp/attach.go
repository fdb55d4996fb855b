package acp

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"strings"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"
)

// Attachment is a file that goes with a prompt: the message that carries
// it, its name and media type as pushed, its size, and where it is kept.
type Attachment struct {
	Message, Author string
	Name, Type      string
	Size            int64
	Path            string
}

// PromptCaps is what the agent said it takes in a prompt besides text and
// links (promptCapabilities of its initialize answer).
type PromptCaps struct {
	Image, EmbeddedContext bool
}

// PromptCaps returns what the agent takes in a prompt.
func (a *Agent) PromptCaps() PromptCaps { return a.caps }

// Blocks is the prompt for text and atts as content blocks the agent
// takes: the text, then per attachment a line naming it (its message, name,
// type, size and path) and, when the agent takes it, the content: an image
// as an image block (promptCapabilities.image), any other file embedded as
// a resource (embeddedContext; text as text, the rest as a base64 blob),
// or else as a resource_link to its file, which every agent takes. An image
// the agent does not take, and a file that can no longer be read, is the
// line alone: the path it names is where the agent's own tools can read it.
func Blocks(text string, atts []Attachment, caps PromptCaps) []sdk.ContentBlock {
	out := []sdk.ContentBlock{sdk.TextBlock(text)}
	for _, at := range atts {
		uri := (&url.URL{Scheme: "file", Path: at.Path}).String()
		line := fmt.Sprintf("Attachment of message %s by %s: %s (%s, %d bytes) at %s", at.Message, at.Author, at.Name, at.Type, at.Size, at.Path)
		image := strings.HasPrefix(at.Type, "image/")
		if image && !caps.Image {
			out = append(out, sdk.TextBlock(line+" (this agent takes no images: open the file to look at it)"))
			continue
		}
		if !image && !caps.EmbeddedContext {
			link := sdk.ResourceLinkBlock(at.Name, uri)
			mt, size := at.Type, int(at.Size)
			link.ResourceLink.MimeType, link.ResourceLink.Size = &mt, &size
			out = append(out, sdk.TextBlock(line), link)
			continue
		}
		data, err := os.ReadFile(at.Path)
		if err != nil {
			out = append(out, sdk.TextBlock(fmt.Sprintf("%s (unreadable now: %v)", line, err)))
			continue
		}
		mt := at.Type
		switch {
		case image:
			out = append(out, sdk.TextBlock(line), sdk.ImageBlock(base64.StdEncoding.EncodeToString(data), at.Type))
		case utf8.Valid(data) && textual(at.Type):
			out = append(out, sdk.TextBlock(line), sdk.ResourceBlock(sdk.EmbeddedResourceResource{TextResourceContents: &sdk.TextResourceContents{Uri: uri, MimeType: &mt, Text: string(data)}}))
		default:
			out = append(out, sdk.TextBlock(line), sdk.ResourceBlock(sdk.EmbeddedResourceResource{BlobResourceContents: &sdk.BlobResourceContents{Uri: uri, MimeType: &mt, Blob: base64.StdEncoding.EncodeToString(data)}}))
		}
	}
	return out
}

// textual reports whether media type mt is embedded as text.
func textual(mt string) bool {
	return strings.HasPrefix(mt, "text/") || strings.HasSuffix(mt, "json") || strings.HasSuffix(mt, "xml") || strings.HasSuffix(mt, "yaml")
}
