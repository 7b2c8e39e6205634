package loadcmd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// foreignFlags are the flags a library may name: other tools' (the
// launcher's, the compiler's), and two records that name a command of
// the CLI's with no Python twin. Anything else a user is told to pass is
// the front door's to word (TestFrontWords).
var foreignFlags = []string{
	"srun --mpi",                   // detect: Slurm's MPI plugin, the launcher's fix
	"srun --export=ALL",            // harvest's cause "exports": the launchers' own ways to pass a variable
	"--gpu-architecture",           // presets: nvcc's flag, in DeepGEMM's key
	"kbundle load --allow-missing", // bundle.MetaCreator: what made an empty set (a record, no message)
	"kbundle warm --check",         // a preset's note: the warm-up check, the CLI's only
	"kbundle load --per-node",      // detect: under torchrun, the CLI's route beside load_bundle(group)
}

// TestLibrariesNameNoFlag (issue 27): no string in a library package
// (every package of the module outside cmd/ and the tests' helpers)
// names one of kbundle's flags. The libraries state facts, the path, the
// kind, the bound; the CLI says --force and Python force=True, by the
// error's kind, in this package.
func TestLibrariesNameNoFlag(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	flag := regexp.MustCompile(`(^|[^-\w])--[a-z]`)
	files := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == ".":
			case strings.HasPrefix(rel, "."), rel == "cmd", rel == "test", rel == "docs", rel == "python", rel == "scripts",
				rel == "internal/testutil", d.Name() == "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, ok := range foreignFlags {
				s = strings.ReplaceAll(s, ok, "")
			}
			if flag.MatchString(s) {
				t.Errorf("%s names a flag: %s (state the fact; let loadcmd word the fix per front end)", rel, lit.Value)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("scanned %d library files: the walk missed the packages", files)
	}
}
