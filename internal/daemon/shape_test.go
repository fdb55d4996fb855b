package daemon_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestFunctionsStayShort keeps the package readable as its doc says: a
// turn's steps are short methods. No function of the package (tests
// aside) is longer than 60 lines or takes more than 5 parameters; what
// needs more is a value with methods (the turn, the lane).
func TestFunctionsStayShort(t *testing.T) {
	const maxLines, maxParams = 60, 5
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			params := 0
			for _, p := range fd.Type.Params.List {
				params += max(1, len(p.Names))
			}
			if lines > maxLines || params > maxParams {
				t.Errorf("%s: %s is %d lines with %d parameters (at most %d and %d)", name, fd.Name.Name, lines, params, maxLines, maxParams)
			}
		}
	}
}
