package loadcmd

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func readRepo(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPythonKeywordsAreTheSettings: load_bundle's keywords are the
// table's, but for comm, strict and count (the frameworks' hit hooks, in
// the calling interpreter), which are the binding's own.
func TestPythonKeywordsAreTheSettings(t *testing.T) {
	src := readRepo(t, "python/kbundle/_load.py")
	m := regexp.MustCompile(`(?s)\ndef load_bundle\((.*?)\) -> LoadResult:`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("no def load_bundle in _load.py")
	}
	var got []string
	for _, p := range regexp.MustCompile(`(?m)^\s*(\w+):`).FindAllStringSubmatch(m[1], -1) {
		if name := p[1]; name != "comm" && name != "strict" && name != "count" {
			got = append(got, name)
		}
	}
	var want []string
	for _, s := range Settings {
		if s.Keyword != "" {
			want = append(want, s.Keyword)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("load_bundle's keywords %q, the settings' %q", got, want)
	}
}

// TestHarvestKeywordsAreSettings: harvest()'s keywords are settings of
// the table (resolved by ResolveHarvest, as load_bundle's by Resolve),
// but for comm, strict, dry_run and max_size (harvest's own, as
// --dry-run and --max-size are the CLI's); and docs/python.md
// lists them.
func TestHarvestKeywordsAreSettings(t *testing.T) {
	src := readRepo(t, "python/kbundle/_harvest.py")
	m := regexp.MustCompile(`(?s)\ndef harvest\((.*?)\) -> HarvestResult:`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("no def harvest in _harvest.py")
	}
	keywords := map[string]bool{}
	for _, s := range Settings {
		if s.Keyword != "" {
			keywords[s.Keyword] = true
		}
	}
	python := readRepo(t, "docs/python.md")
	_, section, _ := strings.Cut(python, "## Harvest")
	var got []string
	for _, p := range regexp.MustCompile(`(?m)^\s*(\w+):`).FindAllStringSubmatch(m[1], -1) {
		name := p[1]
		got = append(got, name)
		if name != "comm" && name != "strict" && name != "dry_run" && name != "max_size" && !keywords[name] {
			t.Errorf("harvest's keyword %s is not a setting of loadcmd.Settings", name)
		}
		if name != "comm" && !strings.Contains(section, "| `"+name+"` |") {
			t.Errorf("docs/python.md's harvest section does not list `%s`", name)
		}
	}
	if !slices.Equal(got, []string{"comm", "bundle", "dest", "timeout", "dry_run", "max_size", "strict"}) {
		t.Errorf("harvest's arguments %q", got)
	}
}

// TestDocsListEverySetting keeps docs/ in step with Settings:
// environment.md's table names every variable, and commands/load.md
// every flag; docs/python.md names every keyword.
func TestDocsListEverySetting(t *testing.T) {
	load := readRepo(t, "docs/commands/load.md")
	python := readRepo(t, "docs/python.md")
	_, env, ok := strings.Cut(readRepo(t, "docs/environment.md"), "# Environment variables")
	if !ok {
		t.Fatal("docs/environment.md has no environment table")
	}
	env, _, _ = strings.Cut(env, "\n## ")
	for _, s := range Settings {
		if s.Env != "" && !regexp.MustCompile("(?m)^\\| [^|]*`"+s.Env+"`").MatchString(env) {
			t.Errorf("docs/environment.md's table does not list `%s`", s.Env)
		}
		if s.Flag != "" && !strings.Contains(load, "--"+s.Flag) {
			t.Errorf("docs/commands/load.md does not mention load's --%s", s.Flag)
		}
		if s.Keyword != "" && !strings.Contains(python, "| `"+s.Keyword+"` |") {
			t.Errorf("docs/python.md's argument table does not list `%s`", s.Keyword)
		}
	}
}

// TestAdaptersAreThin: the two front ends' load files parse no setting,
// hold no warning text and classify no error: loadcmd does (issue 16).
func TestAdaptersAreThin(t *testing.T) {
	forbidden := []*regexp.Regexp{
		regexp.MustCompile(`(?i)(getenv|lookupenv)\("KBUNDLE_|Environ\[`), // settings: Resolve
		regexp.MustCompile(`strconv\.`),                                   // parsing: Resolve
		regexp.MustCompile(`errors\.(Is|As)\(`),                           // classification: KindOf, Hint
		regexp.MustCompile(`\bbundle\.Err|\bbroadcast\.Err|\bfs\.Err`),
		regexp.MustCompile(`warning: [a-z]`),  // warning texts: Warnings
		regexp.MustCompile(`"hint: `),         // hints: Hint
		regexp.MustCompile(`time\.AfterFunc`), // the guard: Guard
		regexp.MustCompile(`nothing was installed|belongs to another user|nothing for preset|warmed on`),
	}
	for _, f := range []string{"cmd/kbundle/load.go", "cmd/libkbundle/load.go", "cmd/libkbundle/harvest.go"} {
		for i, line := range strings.Split(readRepo(t, f), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, re := range forbidden {
				if re.MatchString(line) {
					t.Errorf("%s:%d: %s (matches %s): belongs in cmd/internal/loadcmd", f, i+1, strings.TrimSpace(line), re)
				}
			}
		}
	}
}
