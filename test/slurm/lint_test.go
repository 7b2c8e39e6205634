package slurm

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// shellScripts lists the shell scripts kbundle ships for job schedulers and
// CI, and this package's stand-ins: every file with a sh or bash shebang.
func shellScripts(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"scripts/slurm", "scripts/pbs", "scripts/ci", "test/slurm/testdata"} {
		err := filepath.WalkDir(repoPath(dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			line, _ := bufio.NewReader(f).ReadString('\n')
			if strings.HasPrefix(line, "#!") && (strings.Contains(line, "bash") || strings.HasSuffix(strings.TrimSpace(line), "/sh")) {
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 8 {
		t.Fatalf("found only %d shell scripts: %q", len(out), out)
	}
	return out
}

// TestScriptsLint runs `bash -n` and shellcheck on every shipped script and
// checks each is executable.
func TestScriptsLint(t *testing.T) {
	scripts := shellScripts(t)
	haveShellcheck := true
	if _, err := exec.LookPath("shellcheck"); err != nil {
		if testutil.Required("SLURM") {
			t.Fatalf("shellcheck not found (apt-get install -y shellcheck): %v", err)
		}
		haveShellcheck = false
	}
	for _, s := range scripts {
		rel, _ := filepath.Rel(testutil.RepoRoot(), s)
		t.Run(rel, func(t *testing.T) {
			if info, err := os.Stat(s); err != nil || info.Mode()&0o111 == 0 {
				t.Errorf("%s is not executable (%v)", rel, err)
			}
			if so, se, code := run(t, nil, "", "bash", "-n", s); code != 0 {
				t.Errorf("bash -n %s: exit %d\n%s%s", rel, code, so, se)
			}
			if !haveShellcheck {
				t.Skip("shellcheck not installed")
			}
			if so, se, code := run(t, nil, "", "shellcheck", "-x", s); code != 0 {
				t.Errorf("shellcheck %s: exit %d\n%s%s", rel, code, so, se)
			}
		})
	}
}

var reVar = regexp.MustCompile(`\bKBUNDLE_[A-Z_]+\b`)

// TestJobScriptsDocumentVariables checks that every KBUNDLE_* variable a
// job script reads is named in the comment block at its top, and that the
// scheduler directives are there.
func TestJobScriptsDocumentVariables(t *testing.T) {
	for _, dir := range []string{"scripts/slurm", "scripts/pbs"} {
		files, _ := filepath.Glob(filepath.Join(repoPath(dir), "*"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var header, body strings.Builder
			inHeader := true
			for _, l := range strings.Split(string(b), "\n") {
				if inHeader && strings.HasPrefix(l, "#") {
					header.WriteString(l + "\n")
					continue
				}
				inHeader = false
				body.WriteString(l + "\n")
			}
			directive := "#SBATCH "
			if dir == "scripts/pbs" {
				directive = "#PBS "
			}
			if !strings.Contains(header.String(), directive) {
				t.Errorf("%s: no %s lines in its header", f, directive)
			}
			for _, v := range reVar.FindAllString(body.String(), -1) {
				if !strings.Contains(header.String(), v) {
					t.Errorf("%s: reads %s but its header does not document it", f, v)
				}
			}
		}
	}
}
