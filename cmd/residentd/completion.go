package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// The completion scripts are made from the command table, so they offer
// what residentd takes now: each command and, after it, its flags.

// completionFlags lists command c's flags as "--name" with their usage.
func completionFlags(c *command) [][2]string {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	if c.client {
		bindSocket(fs)
	}
	if c.flags != nil {
		c.flags(fs)
	}
	var out [][2]string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, [2]string{"--" + f.Name, firstLine(f.Usage)}) })
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return append(out, [2]string{"--help", "show the command's arguments and flags"})
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// visible is the commands of table that residentd's usage lists.
func visible(table []*command) []*command {
	var out []*command
	for _, c := range table {
		if !c.hidden {
			out = append(out, c)
		}
	}
	return out
}

func runCompletion(_ context.Context, e *cmdEnv) error {
	cmds := visible(e.table)
	switch e.args[0] {
	case "bash":
		return bashCompletion(e.stdout, cmds)
	case "zsh":
		return zshCompletion(e.stdout, cmds)
	case "fish":
		return fishCompletion(e.stdout, cmds)
	}
	return fmt.Errorf("%w: completion for %q: residentd writes it for bash, zsh and fish", errUsage, e.args[0])
}

func bashCompletion(w io.Writer, cmds []*command) error {
	var b strings.Builder
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	b.WriteString("# bash completion for residentd: source it, or put it in your bash-completion directory.\n")
	b.WriteString("_residentd() {\n\tlocal cur=${COMP_WORDS[COMP_CWORD]} words\n")
	fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n\t\treturn\n\tfi\n", strings.Join(names, " "))
	b.WriteString("\tcase \"${COMP_WORDS[1]}\" in\n")
	for _, c := range cmds {
		var fl []string
		for _, f := range completionFlags(c) {
			fl = append(fl, f[0])
		}
		if c.name == "completion" {
			fl = append(fl, "bash", "zsh", "fish")
		}
		fmt.Fprintf(&b, "\t%s) words=%q ;;\n", c.name, strings.Join(fl, " "))
	}
	b.WriteString("\t*) return ;;\n\tesac\n")
	b.WriteString("\tif [[ $cur == -* || ${COMP_WORDS[1]} == completion ]]; then\n\t\tCOMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n\tfi\n}\n")
	b.WriteString("complete -o default -F _residentd residentd\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// quoted makes s safe inside a single-quoted zsh or fish word.
func quoted(s string) string { return strings.ReplaceAll(s, "'", `'\''`) }

func zshCompletion(w io.Writer, cmds []*command) error {
	var b strings.Builder
	b.WriteString("#compdef residentd\n# zsh completion for residentd: put it on your $fpath as _residentd, or source it.\n")
	b.WriteString("_residentd() {\n\tlocal -a cmds\n\tcmds=(\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "\t\t'%s:%s'\n", c.name, quoted(strings.ReplaceAll(c.short, ":", `\:`)))
	}
	b.WriteString("\t)\n\tif (( CURRENT == 2 )); then\n\t\t_describe 'command' cmds\n\t\treturn\n\tfi\n\tcase $words[2] in\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "\t%s) _arguments", c.name)
		for _, f := range completionFlags(c) {
			fmt.Fprintf(&b, " '%s[%s]'", f[0], quoted(strings.NewReplacer("[", `\[`, "]", `\]`, ":", `\:`).Replace(f[1])))
		}
		if c.name == "completion" {
			b.WriteString(" '1:shell:(bash zsh fish)'")
		} else {
			b.WriteString(" '*:file:_files'")
		}
		b.WriteString(" ;;\n")
	}
	b.WriteString("\tesac\n}\ncompdef _residentd residentd 2>/dev/null || _residentd \"$@\"\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func fishCompletion(w io.Writer, cmds []*command) error {
	var b strings.Builder
	b.WriteString("# fish completion for residentd: put it in ~/.config/fish/completions/residentd.fish.\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "complete -c residentd -f -n '__fish_use_subcommand' -a %s -d '%s'\n", c.name, quoted(c.short))
	}
	for _, c := range cmds {
		for _, f := range completionFlags(c) {
			fmt.Fprintf(&b, "complete -c residentd -n '__fish_seen_subcommand_from %s' -l %s -d '%s'\n", c.name, strings.TrimPrefix(f[0], "--"), quoted(f[1]))
		}
	}
	b.WriteString("complete -c residentd -f -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	_, err := io.WriteString(w, b.String())
	return err
}
