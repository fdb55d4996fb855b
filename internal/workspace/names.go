package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"

	"github.com/residentd/residentd/internal/session"
)

// BranchPrefix starts every key's branch: the branches residentd makes are
// apart from people's.
const BranchPrefix = "residentd/"

// ThreadSeparator joins a channel and a thread in a thread key's branch
// and folder name; Escape never leaves it in an id.
const ThreadSeparator = "+"

// maxName bounds an escaped id in a branch or folder name (a file name is
// at most 255 bytes); a longer one is cut to cutAt bytes and ends with '='
// and 16 hex digits of its id's SHA-256.
const (
	maxName = 100
	cutAt   = 80
)

// Branch is key k's branch: residentd/<binding>/<channel>, and for a
// thread key residentd/<binding>/<channel>+<thread>, each id escaped
// (Escape). Two keys never share one, and every one is a valid branch
// name (git check-ref-format --branch).
func Branch(k session.Key) string {
	return BranchPrefix + Escape(k.Binding) + "/" + leaf(k)
}

// Folder is key k's worktree folder under root:
// <root>/<binding>/<channel>, and for a thread key
// <root>/<binding>/<channel>+<thread>, each id escaped as in Branch.
func Folder(root string, k session.Key) string {
	return filepath.Join(root, Escape(k.Binding), leaf(k))
}

// leaf is the key's last name: its channel, and its thread after it.
func leaf(k session.Key) string {
	if k.Thread == "" {
		return Escape(k.Channel)
	}
	return Escape(k.Channel) + ThreadSeparator + Escape(k.Thread)
}

// Escape makes id a name that is safe as one component of a branch and as
// a folder: ASCII letters, digits, '_' and '-' stay; every other byte
// ('.', '/', '+', '%', '@', a space, UTF-8 …) becomes '%' and two
// upper-case hex digits, so no id forges a separator, a "..", a ".lock"
// or a hidden folder, and two ids never escape alike. An escaped id over
// 100 bytes is cut to 80 and ends with '=' and 16 hex digits of the id's
// SHA-256.
func Escape(id string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	s := b.String()
	if len(s) <= maxName {
		return s
	}
	sum := sha256.Sum256([]byte(id))
	cut := s[:cutAt]
	// Not in the middle of an escape.
	if i := strings.LastIndexByte(cut, '%'); i >= cutAt-2 {
		cut = cut[:i]
	}
	return cut + "=" + hex.EncodeToString(sum[:8])
}
