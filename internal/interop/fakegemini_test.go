package interop

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeGemini is a small Gemini API (generateContent, streamGenerateContent,
// countTokens) on 127.0.0.1, for gemini-cli pointed at it with
// GOOGLE_GEMINI_BASE_URL: it answers every model call with a fixed reply
// and records every request it gets.
//
// gemini-cli makes two kinds of call per turn: the turn itself
// (streamGenerateContent?alt=sse), and side calls that ask for JSON
// (generateContent with generationConfig.responseMimeType
// application/json: its model router's complexity score, its
// next-speaker check). A side call gets one JSON object that answers both;
// one that got plain text would be retried with backoff for more than a
// minute before gemini-cli gave up on it.
type fakeGemini struct {
	fakeModel // its stall switch unused: gemini's calls are not cancelled in these tests
}

// geminiRequest is the part of a generateContent request the tests read.
type geminiRequest struct {
	Contents []geminiContent `json:"contents"`
	Config   struct {
		ResponseMimeType string `json:"responseMimeType"`
	} `json:"generationConfig"`
}

type geminiContent struct {
	Role  string `json:"role"`
	Parts []struct {
		Text string `json:"text"`
	} `json:"parts"`
}

// text joins the content's text parts.
func (c geminiContent) text() string {
	var parts []string
	for _, p := range c.Parts {
		parts = append(parts, p.Text)
	}
	return strings.Join(parts, "\n")
}

// sideAnswer answers gemini-cli's JSON side calls: the router's complexity
// score (a low one: the default model) and the next-speaker check (the
// user speaks next, so the turn ends).
const sideAnswer = `{"complexity_reasoning":"a short chat reply","complexity_score":10,"reasoning":"the model answered","next_speaker":"user"}`

func newFakeGemini(t testing.TB, reply string) *fakeGemini {
	t.Helper()
	f := &fakeGemini{fakeModel: newFakeModel(reply)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.close)
	return f
}

// URL is the base URL to hand gemini-cli; always on 127.0.0.1.
func (f *fakeGemini) URL() string { return f.srv.URL }

// turns returns the decoded streamGenerateContent bodies (the turns
// themselves, not the side calls), in order.
func (f *fakeGemini) turns(t testing.TB) []geminiRequest {
	t.Helper()
	var out []geminiRequest
	for _, r := range f.requests() {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.Path, ":streamGenerateContent") {
			continue
		}
		var g geminiRequest
		if err := json.Unmarshal(r.Body, &g); err != nil {
			t.Fatalf("fake Gemini API: request body is not a generateContent request: %v: %.200s", err, r.Body)
		}
		out = append(out, g)
	}
	return out
}

func (f *fakeGemini) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := f.record(r)
	var req geminiRequest
	_ = json.Unmarshal(body, &req)
	in := len(body) / 4 // a real model's count grows with the conversation
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":countTokens"):
		fmt.Fprintf(w, `{"totalTokens": %d}`, in)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":generateContent"):
		text := f.reply
		if req.Config.ResponseMimeType == "application/json" {
			text = sideAnswer
		}
		_ = json.NewEncoder(w).Encode(geminiResponse(text, "STOP", in, 7))
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
		// alt=sse: each chunk is one server-sent event; two chunks, so the
		// reply reaches the client as more than one update.
		w.Header().Set("Content-Type", "text/event-stream")
		fl, _ := w.(http.Flusher)
		half := len(f.reply) / 2
		for i, part := range []string{f.reply[:half], f.reply[half:]} {
			chunk := geminiResponse(part, "", 0, 0)
			if i == 1 {
				chunk = geminiResponse(part, "STOP", in, 7)
			}
			b, _ := json.Marshal(chunk)
			fmt.Fprintf(w, "data: %s\n\n", b)
			if fl != nil {
				fl.Flush()
			}
		}
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error": {"code": 404, "message": "not served by the test's fake Gemini API", "status": "NOT_FOUND"}}`)
	}
}

// geminiResponse is one GenerateContentResponse: the text as the model's
// content, with the finish reason and usage when given.
func geminiResponse(text, finish string, in, out int) map[string]any {
	cand := map[string]any{"index": 0, "content": map[string]any{"role": "model", "parts": []map[string]any{{"text": text}}}}
	if finish != "" {
		cand["finishReason"] = finish
	}
	resp := map[string]any{"candidates": []any{cand}, "modelVersion": "gemini-fake"}
	if finish != "" {
		resp["usageMetadata"] = map[string]any{"promptTokenCount": in, "candidatesTokenCount": out, "totalTokenCount": in + out}
	}
	return resp
}
