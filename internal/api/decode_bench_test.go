package api

import (
	"strconv"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
)

// deepBody is a turn body whose text field holds depth nested arrays.
func deepBody(depth int) []byte {
	return []byte(`{"text":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
}

// BenchmarkDecodeDeep is the request decoder on a turn body nested depth
// levels deep: refused, in time and memory linear in the body.
func BenchmarkDecodeDeep(b *testing.B) {
	for _, depth := range []int{1_000, 10_000, 1_000_000} {
		b.Run("depth="+strconv.Itoa(depth), func(b *testing.B) {
			body := deepBody(depth)
			b.ReportAllocs()
			for b.Loop() {
				if err := decodeBytes(body, new(apitype.TurnRequest)); err == nil {
					b.Fatal("a deep body was accepted")
				}
			}
		})
	}
}

// BenchmarkDecodeTurnBody is the request decoder on a turn as the desktop
// app sends it.
func BenchmarkDecodeTurnBody(b *testing.B) {
	body := []byte(`{"channel_id":"ch-backend","binding_id":"b-claude","message_id":"m-1042","thread_root_id":"m-1000","run_id":"run-7",` +
		`"text":"@claude why is the refund spec flaky? look at the last runs","max_recipients":3,` +
		`"channel_agents":[{"handle":"@claude","reachable":true},{"handle":"@gemini","reachable":false}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := decodeBytes(body, new(apitype.TurnRequest)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeWide is the request decoder on a megabyte that nests as
// deep as MaxDepth allows, over and over: what an allowed body can cost.
func BenchmarkDecodeWide(b *testing.B) {
	chain := strings.Repeat("[", 62) + strings.Repeat("]", 62)
	body := []byte(`{"text":[` + strings.Repeat(chain+",", (1<<20)/len(chain)) + `1]}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := decodeBytes(body, new(apitype.TurnRequest)); err == nil {
			b.Fatal("an array for text was accepted")
		}
	}
}
