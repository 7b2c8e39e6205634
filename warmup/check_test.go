package warmup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/preset"

	"github.com/kbundle/kbundle/bundle"
)

// Toy frameworks, as sh scripts over $TACK_CACHE_DIR: each "compiles"
// (writes an entry) on a miss and only reads on a hit.
const (
	// toyGood keys its entry on the kernel only: path-independent.
	toyGood = `k="$TACK_CACHE_DIR/kernel.bin"; [ -f "$k" ] || echo compiled >"$k"`
	// toyPathKeyed keys its entry on the cache's own absolute path, so a
	// moved copy never hits (the deliberately broken case).
	toyPathKeyed = `key=$(printf %s "$TACK_CACHE_DIR" | cksum | cut -d" " -f1); k="$TACK_CACHE_DIR/kernel-$key.bin"; [ -f "$k" ] || echo compiled >"$k"`
	// toyRewrite reads its entry but rewrites it every time.
	toyRewrite = `echo compiled >"$TACK_CACHE_DIR/kernel.bin"`
	// toyEvict removes what it finds and writes nothing.
	toyEvict = `rm -f "$TACK_CACHE_DIR"/*`
)

func tack(t *testing.T) []*preset.Preset {
	t.Helper()
	p, err := preset.Lookup("tack")
	if err != nil {
		t.Fatal(err)
	}
	return []*preset.Preset{p}
}

// warmToy fills a cache directory by running script once, as kbundle
// warm does.
func warmToy(t *testing.T, script string, presets []*preset.Preset) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	if err := preset.Prepare(dir, presets...); err != nil {
		t.Fatal(err)
	}
	env, err := preset.ChildEnv([]string{"PATH=" + os.Getenv("PATH")}, dir, presets...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), &Options{Argv: []string{"sh", "-c", script}, Env: env, Dir: dir})
	if err != nil || res.Failed() {
		t.Fatalf("warm-up: %v %+v", err, res)
	}
	return dir
}

func check(t *testing.T, dir, script string, presets []*preset.Preset, bundlePath string) (*CheckResult, string, error) {
	t.Helper()
	var out bytes.Buffer
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Check(ctx, &CheckOptions{
		Dir: dir, Bundle: bundlePath, Presets: presets,
		Argv:    []string{"sh", "-c", script + `; echo "ran in $TACK_CACHE_DIR"`},
		Env:     []string{"PATH=" + os.Getenv("PATH"), "OMPI_COMM_WORLD_RANK=3"},
		TempDir: tmp, Stdout: &out, Stderr: &out,
	})
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("check left %d entries in its temporary directory", len(left))
	}
	return res, out.String(), err
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		warm    string
		run     string
		reused  bool
		written string // a substring of the first written path
		rewrote int
		removed int
	}{
		{"path-independent cache is reused", toyGood, toyGood, true, "", 0, 0},
		{"cache keyed on its own path is not", toyPathKeyed, toyPathKeyed, false, "tack/kernel-", 0, 0},
		{"rewritten entry is not", toyGood, toyRewrite, false, "", 1, 0},
		{"removed entry is not", toyGood, toyEvict, false, "", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := tack(t)
			dir := warmToy(t, tc.warm, ps)
			res, out, err := check(t, dir, tc.run, ps, "")
			if tc.reused {
				if err != nil || !res.Reused() {
					t.Fatalf("err %v, result %+v\n%s", err, res, out)
				}
			} else if !errors.Is(err, ErrNotReused) || res.Reused() {
				t.Fatalf("err %v, want ErrNotReused; result %+v\n%s", err, res, out)
			}
			if tc.written != "" && (len(res.Written) != 1 || !strings.Contains(res.Written[0].Path, tc.written)) {
				t.Errorf("written %v, want one path containing %q", paths(res.Written), tc.written)
			}
			if tc.written == "" && len(res.Written) != 0 {
				t.Errorf("written %v, want none", paths(res.Written))
			}
			if len(res.Rewritten) != tc.rewrote {
				t.Errorf("rewritten %v, want %d", paths(res.Rewritten), tc.rewrote)
			}
			if len(res.Removed) != tc.removed {
				t.Errorf("removed %v, want %d", paths(res.Removed), tc.removed)
			}
			// The check ran against a copy elsewhere, not DIR, with the
			// launcher variables removed.
			if !strings.Contains(out, "ran in "+res.Copy) || res.Copy == dir || strings.HasPrefix(res.Copy, dir) {
				t.Errorf("copy %s, output %q", res.Copy, out)
			}
			if res.Origin != dir {
				t.Errorf("origin %q, want %q", res.Origin, dir)
			}
			if _, err := os.Stat(res.Copy); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("copy %s left behind", res.Copy)
			}
			var rep bytes.Buffer
			res.Report(&rep, 10)
			verdict := "kbundle: check: NOT reused"
			if tc.reused {
				verdict = "kbundle: check: reused"
			}
			if !strings.HasPrefix(rep.String(), verdict) || (tc.written != "" && !strings.Contains(rep.String(), "added "+tc.written)) {
				t.Errorf("report:\n%s", rep.String())
			}
		})
	}
}

func TestCheckLauncherScrubbed(t *testing.T) {
	ps := tack(t)
	dir := warmToy(t, toyGood, ps)
	_, out, err := check(t, dir, `echo "rank=${OMPI_COMM_WORLD_RANK:-none}"`, ps, "")
	if err != nil || !strings.Contains(out, "rank=none") {
		t.Errorf("err %v; the check run saw a launcher variable: %q", err, out)
	}
}

func TestCheckFailedRun(t *testing.T) {
	ps := tack(t)
	dir := warmToy(t, toyGood, ps)
	res, _, err := check(t, dir, "exit 7", ps, "")
	if err != nil || res.Run == nil || res.Run.ExitCode != 7 || res.Reused() {
		t.Errorf("err %v result %+v: want a failed run, not reused, no error", err, res)
	}
}

func TestCheckEmptyCache(t *testing.T) {
	ps := tack(t)
	dir := warmToy(t, "true", ps)
	if _, _, err := check(t, dir, toyGood, ps, ""); !errors.Is(err, ErrNothingToCheck) || !strings.Contains(err.Error(), "empty") {
		t.Errorf("err %v, want ErrNothingToCheck", err)
	}
}

// With a bundle already packed (warm --pack), Check uses it: the copy is
// exactly what load unpacks, and the bundle inside DIR is not copied.
func TestCheckExistingBundle(t *testing.T) {
	ps := tack(t)
	dir := warmToy(t, toyGood, ps)
	out := filepath.Join(dir, "cache.kbundle")
	if _, err := bundle.Pack(context.Background(), dir, out, &bundle.PackOptions{Preset: "tack"}); err != nil {
		t.Fatal(err)
	}
	res, log, err := check(t, dir, toyGood+`; ls -R "$TACK_CACHE_DIR/.."`, ps, out)
	if err != nil || !res.Reused() {
		t.Fatalf("err %v result %+v\n%s", err, res, log)
	}
	if res.Files != 1 || strings.Contains(log, "cache.kbundle") {
		t.Errorf("copy held %d files (%s); want the kernel only", res.Files, log)
	}
}

// The presets' relocation runs on the copy: a Triton group file naming
// its children under DIR is rewritten to the copy, so a framework that
// checks those paths finds them.
func TestCheckRelocates(t *testing.T) {
	p, _ := preset.Lookup("triton")
	ps := []*preset.Preset{p}
	dir := filepath.Join(t.TempDir(), "cache")
	key := filepath.Join(dir, "triton", "KEY")
	if err := os.MkdirAll(key, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(key, "k.bin"), []byte("kernel"), 0o600)
	os.WriteFile(filepath.Join(key, "__grp__k.json"), []byte(`{"child_paths":{"k.bin":"`+filepath.Join(key, "k.bin")+`"}}`), 0o600)
	// Hit when the group's child path exists, else "recompile".
	script := `g="$TRITON_CACHE_DIR/KEY/__grp__k.json"; p=$(sed 's/.*"k.bin":"\([^"]*\)".*/\1/' "$g"); [ -f "$p" ] && case $p in "$TRITON_CACHE_DIR"/*) exit 0;; esac; echo rebuilt >"$TRITON_CACHE_DIR/KEY/k.bin"`
	res, out, err := check(t, dir, script, ps, "")
	if err != nil || !res.Reused() {
		t.Fatalf("err %v, written %v\n%s", err, paths(res.Written), out)
	}
}

// pocl's bookkeeping on a hit (empty last_accessed stamps, empty
// tempfile_*) is not a rebuild; a kernel file with content is.
func TestCheckIgnoresBookkeeping(t *testing.T) {
	p, _ := preset.Lookup("pocl")
	ps := []*preset.Preset{p}
	dir := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(filepath.Join(dir, "pocl", "kcache", "AB", "CD"), 0o700)
	os.WriteFile(filepath.Join(dir, "pocl", "kcache", "AB", "CD", "parallel.bc"), []byte("bitcode"), 0o600)
	stamp := `: >"$POCL_CACHE_DIR/kcache/AB/CD/last_accessed"; : >"$POCL_CACHE_DIR/tempfile_x1"`
	res, out, err := check(t, dir, stamp, ps, "")
	if err != nil || !res.Reused() || len(res.Ignored) != 2 {
		t.Fatalf("err %v, written %v ignored %v\n%s", err, paths(res.Written), paths(res.Ignored), out)
	}
	res, _, err = check(t, dir, stamp+`; echo obj >"$POCL_CACHE_DIR/kcache/AB/CD/last_accessed"`, ps, "")
	if !errors.Is(err, ErrNotReused) || len(res.Written) != 1 {
		t.Fatalf("err %v, written %v: a stamp with content must count", err, paths(res.Written))
	}
}

func TestCheckNoCommand(t *testing.T) {
	if _, err := Check(context.Background(), &CheckOptions{Dir: t.TempDir()}); !errors.Is(err, ErrNoCommand) {
		t.Errorf("err %v", err)
	}
}

// JAX keeps an entry that XLA:CPU's AOT loader refused (jax-ml/jax#38445)
// and compiles again without writing: only the log line tells, and Check
// reports it as not reused.
func TestCheckRefusedEntry(t *testing.T) {
	p, _ := preset.Lookup("jax")
	ps := []*preset.Preset{p}
	dir := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(filepath.Join(dir, "jax"), 0o700)
	os.WriteFile(filepath.Join(dir, "jax", "jit_f-abc-cache"), []byte("entry"), 0o600)
	loader := `printf 'E1130 cpu_aot_loader.cc:195] Loading XLA:CPU AOT result. Target machine feature +prefer-no-gather is not supported on the host machine.\n' >&2`
	res, out, err := check(t, dir, loader, ps, "")
	if !errors.Is(err, ErrNotReused) || len(res.Refused) != 1 || len(res.Written) != 0 {
		t.Fatalf("err %v, refused %q, written %v\n%s", err, res.Refused, paths(res.Written), out)
	}
	if !strings.Contains(out, "Target machine feature") {
		t.Errorf("the run's stderr was not passed through: %q", out)
	}
	var rep bytes.Buffer
	res.Report(&rep, 10)
	if !strings.Contains(rep.String(), "NOT reused: the framework refused entries") || !strings.Contains(rep.String(), "+prefer-no-gather") {
		t.Errorf("report:\n%s", rep.String())
	}
	// The same line from a preset that does not know it is just output.
	res, _, err = check(t, warmToy(t, toyGood, tack(t)), toyGood+"; "+loader, tack(t), "")
	if err != nil || !res.Reused() {
		t.Errorf("tack: err %v refused %q", err, res.Refused)
	}
}

func TestLineMatcherSplitWrites(t *testing.T) {
	w := &refusalWatcher{signs: []string{"needle"}}
	var out bytes.Buffer
	m := w.tee(&out)
	for _, part := range []string{"hay ne", "edle hay\nother\nnee", "dle\n"} {
		m.Write([]byte(part))
	}
	if got := w.found(); len(got) != 2 || got[0] != "hay needle hay" || got[1] != "needle" {
		t.Errorf("found %q", got)
	}
	if out.String() != "hay needle hay\nother\nneedle\n" {
		t.Errorf("passed through %q", out.String())
	}
}

// JAX with eviction on rewrites an 8-byte KEY-atime stamp per hit: that is
// bookkeeping; a new -cache entry is not.
func TestCheckJAXEvictionStamps(t *testing.T) {
	p, _ := preset.Lookup("jax")
	ps := []*preset.Preset{p}
	dir := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(filepath.Join(dir, "jax"), 0o700)
	os.WriteFile(filepath.Join(dir, "jax", "jit_f-abc-cache"), []byte("entry"), 0o600)
	os.WriteFile(filepath.Join(dir, "jax", "jit_f-abc-atime"), []byte("12345678"), 0o600)
	stamp := `sleep 0.01; printf 87654321 >"$JAX_COMPILATION_CACHE_DIR/jit_f-abc-atime"; : >"$JAX_COMPILATION_CACHE_DIR/.lockfile"`
	res, out, err := check(t, dir, stamp, ps, "")
	if err != nil || !res.Reused() || len(res.Ignored) != 2 {
		t.Fatalf("err %v, written %v rewritten %v ignored %v\n%s", err, paths(res.Written), paths(res.Rewritten), paths(res.Ignored), out)
	}
	res, _, err = check(t, dir, stamp+`; echo new >"$JAX_COMPILATION_CACHE_DIR/jit_g-def-cache"`, ps, "")
	if !errors.Is(err, ErrNotReused) || len(res.Written) != 1 {
		t.Fatalf("err %v, written %v: a new entry must count", err, paths(res.Written))
	}
}

// Without a preset, a variable the user set to DIR themselves is pointed
// at the copy; with neither, the check refuses to prove anything.
func TestCheckUserVariable(t *testing.T) {
	ps := tack(t)
	dir := warmToy(t, toyGood, ps)
	var out bytes.Buffer
	run := func(env ...string) (*CheckResult, error) {
		out.Reset()
		return Check(context.Background(), &CheckOptions{
			Dir: dir, Argv: []string{"sh", "-c", toyGood + `; echo "ran in $TACK_CACHE_DIR"`},
			Env: append([]string{"PATH=" + os.Getenv("PATH")}, env...), TempDir: t.TempDir(), Stdout: &out, Stderr: &out,
		})
	}
	res, err := run("TACK_CACHE_DIR="+filepath.Join(dir, "tack"), "OTHER=/x:"+dir+":/y")
	if err != nil || !res.Reused() || !strings.Contains(out.String(), "ran in "+filepath.Join(res.Copy, "tack")) {
		t.Fatalf("err %v, %+v\n%s", err, res, out.String())
	}
	if _, err := run("UNRELATED=/x"); !errors.Is(err, ErrNothingToCheck) || !errors.Is(err, ErrUnpointed) || !strings.Contains(err.Error(), "no preset given") {
		t.Errorf("err %v, want ErrNothingToCheck naming --preset", err)
	}
}

func TestRetarget(t *testing.T) {
	env, n := retarget([]string{
		"A=/d", "B=/d/sub", "C=/dx", "D=/x:/d/j:/y", "E=/tmp/copy/numba", "F=plain",
	}, "/d", "/tmp/copy")
	want := []string{"A=/tmp/copy", "B=/tmp/copy/sub", "C=/dx", "D=/x:/tmp/copy/j:/y", "E=/tmp/copy/numba", "F=plain"}
	if n != 3 || strings.Join(env, " ") != strings.Join(want, " ") {
		t.Errorf("%q (%d), want %q (3)", env, n, want)
	}
	// A copy inside DIR is not rewritten again.
	env, n = retarget([]string{"A=/d/.check/c/numba", "B=/d/numba"}, "/d", "/d/.check/c")
	if n != 1 || env[0] != "A=/d/.check/c/numba" || env[1] != "B=/d/.check/c/numba" {
		t.Errorf("%q %d", env, n)
	}
}
