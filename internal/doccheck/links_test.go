package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile("(?m)^#{1,6} (.+)$")
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
)

// slug is GitHub's anchor of a heading: lower case, punctuation but
// hyphens and underscores dropped, each space a hyphen.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors of a markdown file's headings (a repeated one
// gets -1, -2, ... as on GitHub).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		s := slug(m[1])
		a := s
		for i := 1; out[a]; i++ {
			a = s + "-" + strconv.Itoa(i)
		}
		out[a] = true
	}
	return out
}

// TestDocLinks: every relative link of the docs (docs/, README.md,
// python/README.md) names a file that exists and, with #anchor, one of
// its headings. The docs moved between files (issue 27's split of
// usage.md); a link left behind fails here.
func TestDocLinks(t *testing.T) {
	root := testutil.RepoRoot()
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	more, _ := filepath.Glob(filepath.Join(root, "docs", "*", "*.md"))
	files = append(files, more...)
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "python", "README.md"))
	cache := map[string]map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q: no file %s", rel, target, path)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			if cache[file] == nil {
				tb, _ := os.ReadFile(file)
				cache[file] = anchors(string(tb))
			}
			if !cache[file][anchor] {
				t.Errorf("%s: link %q: no heading #%s in %s", rel, target, anchor, filepath.Base(file))
			}
		}
	}
}
