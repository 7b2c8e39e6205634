// Package doccheck holds one test: every exported name of the module's
// non-test Go files has a doc comment.
package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// wellKnown are methods of standard interfaces (error, fmt.Stringer,
// errors.Is/Unwrap): their meaning is the interface's.
var wellKnown = map[string]bool{"Error": true, "String": true, "Unwrap": true, "Is": true, "As": true, "Format": true}

// TestExportedNamesDocumented fails for each exported function, method (of
// an exported type; not Error, String, ...), type, constant or variable without a doc comment. A
// constant or variable in a documented group, or with a line comment,
// counts as documented, as go doc shows them.
func TestExportedNamesDocumented(t *testing.T) {
	root := testutil.RepoRoot()
	fset := token.NewFileSet()
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") && p != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		missing := func(pos token.Pos, name string) {
			t.Errorf("%s:%d: exported %s has no doc comment", rel, fset.Position(pos).Line, name)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				n++
				if !d.Name.IsExported() || d.Doc != nil {
					continue
				}
				if d.Recv != nil && wellKnown[d.Name.Name] {
					continue // Error, String...: the interface documents them
				}
				if d.Recv != nil {
					typ := d.Recv.List[0].Type
					for {
						switch x := typ.(type) {
						case *ast.StarExpr:
							typ = x.X
							continue
						case *ast.IndexExpr:
							typ = x.X
							continue
						case *ast.IndexListExpr:
							typ = x.X
							continue
						}
						break
					}
					if id, ok := typ.(*ast.Ident); !ok || !id.IsExported() {
						continue
					}
				}
				missing(d.Pos(), d.Name.Name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						n++
						if s.Name.IsExported() && s.Doc == nil && d.Doc == nil && s.Comment == nil {
							missing(s.Pos(), s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, name := range s.Names {
							n++
							if name.IsExported() && s.Doc == nil && d.Doc == nil && s.Comment == nil {
								missing(name.Pos(), name.Name)
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 300 {
		t.Fatalf("checked only %d declarations: is the walk right?", n)
	}
}
