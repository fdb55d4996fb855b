package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
)

// jsonRoutes lists every operation docs/openapi.json gives a request body,
// with its path parameters filled in.
func jsonRoutes(t *testing.T) [][2]string {
	t.Helper()
	param := regexp.MustCompile(`\{[a-z_]+\}`)
	var out [][2]string
	for path, ops := range openAPIPaths(t) {
		for method, op := range ops {
			var o struct {
				RequestBody json.RawMessage `json:"requestBody"`
			}
			if json.Unmarshal(op, &o) == nil && o.RequestBody != nil {
				out = append(out, [2]string{strings.ToUpper(method), param.ReplaceAllString(path, "x")})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][1]+out[i][0] < out[j][1]+out[j][0] })
	return out
}

// totalAlloc is the bytes the process has allocated so far.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// allocated is the fewest bytes the process allocated over tries calls of
// f: the count is process-wide, and the least of a few is f's own.
func allocated(tries int, f func()) uint64 {
	least := ^uint64(0)
	for range tries {
		before := totalAlloc()
		f()
		least = min(least, totalAlloc()-before)
	}
	return least
}

// Every route that takes a JSON body refuses a body nested 10⁶ deep with
// 400 nesting_too_deep, at the bracket that goes too deep: the whole
// request (client and server in this process) allocates a bounded amount,
// far below the body's size, whatever the route's body limit. The daemon
// then still answers a turn.
func TestDeepBodiesRefusedAtEveryRoute(t *testing.T) {
	e := newEnv(t)
	routes := jsonRoutes(t)
	if len(routes) < 9 {
		t.Fatalf("docs/openapi.json lists %d operations with a request body, want at least 9: %v", len(routes), routes)
	}
	const deep = 1_000_000
	bodies := map[string]string{
		"arrays":  strings.Repeat("[", deep) + strings.Repeat("]", deep),
		"objects": strings.Repeat(`{"a":`, deep) + "1" + strings.Repeat("}", deep),
	}
	// Per request (the least of three): the HTTP machinery of both ends and
	// a few KiB of body read before the refusal. The decoder before the bound allocated
	// 159 MB for a body 10⁴ deep and grew with the square of the depth.
	const bound = 512 << 10
	for _, rt := range routes {
		for shape, body := range bodies {
			t.Run(rt[0]+" "+rt[1]+" "+shape, func(t *testing.T) {
				var (
					status int
					er     apitype.Error
				)
				used := allocated(3, func() { status, er = e.raw(t, rt[0], rt[1], body, "Content-Type", "application/json") })
				if status != http.StatusBadRequest || er.Code != apitype.CodeNestingTooDeep || !strings.Contains(er.Message, fmt.Sprintf("deeper than %d levels", MaxDepth)) {
					t.Fatalf("%d %s %q, want 400 nesting_too_deep", status, er.Code, er.Message)
				}
				t.Logf("%d bytes allocated for a %d-byte body", used, len(body))
				if used > bound {
					t.Errorf("the request allocated %d bytes, want at most %d", used, bound)
				}
			})
		}
	}
	if status, _ := e.raw(t, "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-builtin","text":"@agent still here"}`); status != http.StatusOK {
		t.Fatalf("turn after the deep bodies: %d", status)
	}
}

// The decoder alone: a body 10⁶ deep costs what one 10³ deep costs (the
// scan stops at level 65), and a body at the limit, 64 deep, decodes.
func TestDecoderAllocationBound(t *testing.T) {
	for _, depth := range []int{1_000, 1_000_000} {
		body := deepBody(depth)
		var err error
		allocs := testing.AllocsPerRun(5, func() { err = decodeBytes(body, new(apitype.TurnRequest)) })
		used := allocated(5, func() { decodeBytes(body, new(apitype.TurnRequest)) })
		if !errorsIsTooDeep(err) {
			t.Fatalf("depth %d: %v, want nesting too deep", depth, err)
		}
		t.Logf("depth %d (%d bytes): %.0f allocations, %d bytes", depth, len(body), allocs, used)
		if allocs > 8 || used > 1<<10 {
			t.Errorf("depth %d: %.0f allocations, %d bytes; want at most 8 and 1 KiB", depth, allocs, used)
		}
	}
	// At the limit: a body nested exactly MaxDepth deep is decoded (and
	// refused for its type, not its depth), and a megabyte of such
	// nesting costs memory in proportion to its size.
	var req apitype.SessionOptionsRequest
	at := `{"channel_id":"ch","binding_id":"b","options":{"model":` + strings.Repeat("[", MaxDepth-2) + strings.Repeat("]", MaxDepth-2) + `}}`
	if err := decodeBytes([]byte(at), &req); err == nil || errorsIsTooDeep(err) || !strings.Contains(err.Error(), "must be a JSON string") {
		t.Fatalf("a body %d deep: %v, want the ordinary refusal of a wrong type", MaxDepth, err)
	}
	chain := strings.Repeat("[", MaxDepth-2) + strings.Repeat("]", MaxDepth-2)
	wide := []byte(`{"text":[` + strings.Repeat(chain+",", (1<<20)/len(chain)) + `1]}`)
	var err error
	used := allocated(2, func() { err = decodeBytes(wide, new(apitype.TurnRequest)) })
	if err == nil || errorsIsTooDeep(err) {
		t.Fatalf("a megabyte %d deep: %v, want the refusal of an array for text", MaxDepth, err)
	}
	t.Logf("%d bytes nested %d deep: %d bytes allocated (%.1f per byte)", len(wide), MaxDepth, used, float64(used)/float64(len(wide)))
	if used > 16*uint64(len(wide)) {
		t.Errorf("a %d-byte body %d deep allocated %d bytes, want at most 16 per byte", len(wide), MaxDepth, used)
	}
}

func errorsIsTooDeep(err error) bool {
	status, code := classify(err)
	return status == http.StatusBadRequest && code == apitype.CodeNestingTooDeep
}
