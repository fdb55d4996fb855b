package acp

import (
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/testkit"
)

// TestLineDecoderAsUnmarshal: one decoder kept across lines accepts and
// refuses each line exactly as json.Unmarshal does, and decodes the same
// value, whatever came before it.
func TestLineDecoderAsUnmarshal(t *testing.T) {
	lines := []string{
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi \u00e9"}}}}` + "\n",
		`{"method":"session/update"} {"method":"x"}` + "\n",
		`  {"method":"session/update","id":7}  ` + "\n",
		`{"method":"session/update","params":` + "\n",
		`{"method":"session/update","params":{"sessionId":"s2"}}`,
		`{"method":"session/update"}x` + "\n",
		`[1,2]` + "\n",
		`{"method":"session/update","params":{"sessionId":"s3","update":{"sessionUpdate":"usage_update","used":5,"size":9}}}` + "\r\n",
		`{"method":"session/update","params":{"sessionId":"` + strings.Repeat("a", apitype.LineDecoderKeep) + `"}}` + "\n",
		`{"method":"session/update","params":{"sessionId":"s4"}}` + "\n",
		`not json` + "\n",
		`{"method":"session/update","params":{"sessionId":"s5"}}` + "\n",
	}
	testkit.DecodesAsUnmarshal[envelope](t, lines)
}
