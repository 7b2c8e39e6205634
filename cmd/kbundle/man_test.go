package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// pythonOnly are the variables of docs/environment.md's table that only the
// Python package reads: the kbundle program does not list them.
var pythonOnly = []string{"KBUNDLE_LIBRARY"}

// TestEnvironmentAgrees checks that the man page's ENVIRONMENT, the
// [$KBUNDLE_...] hints of every command's --help (plus otherEnv, the
// variables no flag is bound to) and docs/environment.md's table
// name the same KBUNDLE_ variables.
func TestEnvironmentAgrees(t *testing.T) {
	kb := regexp.MustCompile(`KBUNDLE_[A-Z_]+`)
	page := manPage(newApp(nil, nil))
	env, _, ok := strings.Cut(page[strings.Index(page, ".SH ENVIRONMENT"):], ".SH EXIT STATUS")
	if !ok {
		t.Fatal("man page: no ENVIRONMENT before EXIT STATUS")
	}
	var man []string
	for _, m := range regexp.MustCompile(`(?m)^\.B (KBUNDLE_[A-Z_]+)$`).FindAllStringSubmatch(env, -1) {
		man = append(man, m[1])
	}

	var help []string
	for _, c := range newApp(nil, nil).Commands {
		var out, errb bytes.Buffer
		if code := run([]string{"kbundle", c.Name, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("kbundle %s --help: exit %d: %s", c.Name, code, errb.String())
		}
		for _, m := range regexp.MustCompile(`\[\$(KBUNDLE_[A-Z_]+)\]`).FindAllStringSubmatch(out.String(), -1) {
			help = append(help, m[1])
		}
	}
	for _, e := range otherEnv {
		if strings.HasPrefix(e.name, "KBUNDLE_") {
			help = append(help, e.name)
		}
	}

	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "docs", "environment.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "# Environment variables\n")
	if !ok {
		t.Fatal("docs/environment.md: no Environment variables title")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var doc []string
	for l := range strings.Lines(table) {
		if first, _, ok := strings.Cut(strings.TrimPrefix(l, "|"), "|"); ok && strings.HasPrefix(l, "| `") {
			for _, n := range kb.FindAllString(first, -1) {
				if !slices.Contains(pythonOnly, n) {
					doc = append(doc, n)
				}
			}
		}
	}

	set := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return slices.Compact(s) }
	man, help, doc = set(man), set(help), set(doc)
	if len(man) < 10 {
		t.Fatalf("man page ENVIRONMENT lists only %q", man)
	}
	if !slices.Equal(man, help) {
		t.Errorf("man page ENVIRONMENT %q\n--help hints and otherEnv %q", man, help)
	}
	if !slices.Equal(man, doc) {
		t.Errorf("man page ENVIRONMENT %q\ndocs/environment.md's table %q", man, doc)
	}
}

// TestCommandsDocumented: docs/commands/README.md names every command the
// definitions hold (the one source of `kbundle help`, the man page and
// the completions), in its table or, for help, man and completion, in
// the words above it; and the pages it links to exist.
func TestCommandsDocumented(t *testing.T) {
	dir := filepath.Join(testutil.RepoRoot(), "docs", "commands")
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, c := range newApp(nil, nil).Commands {
		if c.Hidden {
			continue
		}
		if !strings.Contains(doc, "\n| `"+c.Name) && !strings.Contains(doc, ", `"+c.Name+" ") && !strings.Contains(doc, "`kbundle "+c.Name) {
			t.Errorf("docs/commands/README.md does not name %s", c.Name)
		}
	}
	for _, m := range regexp.MustCompile(`\]\(([a-z]+\.md)\)`).FindAllStringSubmatch(doc, -1) {
		if _, err := os.Stat(filepath.Join(dir, m[1])); err != nil {
			t.Errorf("docs/commands/README.md links to %s: %v", m[1], err)
		}
	}
}
