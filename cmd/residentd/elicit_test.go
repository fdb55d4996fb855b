package main

import (
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/testkit"
)

// mention --ask yes asks the agent's form at the terminal, property by
// property: a value of the wrong type is asked again at once, content the
// daemon refuses (invalid_content) asks the form again, and the answer
// names --as, the binding's only approver (the mention's --author).
func TestMentionAsksAForm(t *testing.T) {
	d := startDaemon(t, serveOpts{config: `{"bindings":[{"id":"b-form","handle":"@form","command":$EXE,"args":["agent"],"approvers":"author","supervised":true,"resident":true}]}`})
	// Sorted: confirm, env, note, replicas.
	stdin := "yes\nmaybe\nyes\nmoon\n\n\n" + "yes\ny\nstaging\nfirst\n3\n"
	p := newProc(testkit.Exe(t), []string{"mention", "--binding", "b-form", "--channel", "ch-form", "--ask", "yes", "--author", "u-ana", "--as", "u-ana", "--socket", d.sock, "[[elicit:deploy]] ship it"}, childEnv())
	p.cmd.Stdin = strings.NewReader(stdin)
	p.start(t)
	code := p.wait(t, 60*time.Second)
	got := p.out.String()
	if code != exitOK {
		t.Fatalf("mention: exit %d\n%s", code, got)
	}
	for _, want := range []string{"the agent asks: builtin asks: deploy", "env (Environment) [string: staging|production, required]: ", `"maybe": answer yes or no`, "invalid_content", "[form elicit-1: accept, by person]", "watermark"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	runs := d.cli(t, "", exitOK, "", "runs", "--json")
	if !strings.Contains(runs, `"author": "u-ana"`) && !strings.Contains(runs, `"author":"u-ana"`) {
		t.Errorf("runs lists no author:\n%s", runs)
	}
}
