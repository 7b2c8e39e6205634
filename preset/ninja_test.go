package preset

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNinjaHashMatchesNinja: the commands evaluated from a build.ninja
// that PyTorch wrote hash to what ninja 1.11 logged for them.
func TestNinjaHashMatchesNinja(t *testing.T) {
	manifest, err := os.ReadFile(filepath.Join("testdata", "ninja-torch", "build.ninja"))
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join("testdata", "ninja-torch", "ninja_log"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := evalNinja(string(manifest))
	if len(cmds) != 2 {
		t.Fatalf("evaluated %d commands, want 2: %q", len(cmds), cmds)
	}
	n := 0
	for _, line := range strings.Split(string(log), "\n")[1:] {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			continue
		}
		n++
		cmd, ok := cmds[f[3]]
		if !ok {
			t.Errorf("no command for %s", f[3])
			continue
		}
		if got := strconv.FormatUint(ninjaHash(cmd), 16); got != f[4] {
			t.Errorf("%s: hash %s, ninja logged %s for %q", f[3], got, f[4], cmd)
		}
	}
	if n != 2 {
		t.Fatalf("log has %d entries", n)
	}
}

func TestReplacePrefix(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"whole path", "/w/c", "/d/x"},
		{"below", "/w/c/a.o: x", "/d/x/a.o: x"},
		{"twice", "-I/w/c/inc -o /w/c/o", "-I/d/x/inc -o /d/x/o"},
		{"longer name is another path", "/w/cache2/a.o", "/w/cache2/a.o"},
		{"quoted", "'/w/c/a b.o'", "'/d/x/a b.o'"},
		{"escaped colon", "build /w/c$:x", "build /d/x$:x"},
		{"inside another path", "/usr/include/w/c", "/usr/include/w/c"},
		{"after an option", "-I/w/c/inc -L/w/c", "-I/d/x/inc -L/d/x"},
		{"after =", "--dir=/w/c", "--dir=/d/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := replacePrefix(tc.in, "/w/c", "/d/x")
			if got != tc.want {
				t.Errorf("replacePrefix(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// flashinferTree writes, under base (FLASHINFER_WORKSPACE_BASE), one
// module laid out as FlashInfer writes it (flashinfer/jit/env.py:
// .cache/flashinfer/VERSION/ARCHS/{cached_ops,generated}; cpp_ext.py,
// generate_ninja_build_for_op: absolute outputs NAME/SRCDIR_STEM.o and
// NAME.so, cuda_home, rules compile and link with depfiles), its source
// generated into the cache and including a header from site (outside the
// cache, as flashinfer/data/include is). It returns the build directory.
func flashinferTree(t *testing.T, base, site string) string {
	t.Helper()
	ws := filepath.Join(base, ".cache", "flashinfer", "0.6.1", "90")
	build := filepath.Join(ws, "cached_ops", "batch_decode")
	gen := filepath.Join(ws, "generated", "batch_decode")
	for _, d := range []string{build, gen, filepath.Join(site, "include")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeText(t, filepath.Join(site, "include", "decode.h"), "static inline int twice(int x) { return 2 * x; }\n")
	writeText(t, filepath.Join(gen, "batch_decode.c"), "#include \"decode.h\"\nint batch_decode(int x) { return twice(x); }\n")
	obj := filepath.Join(build, "batch_decode_batch_decode.o")
	so := filepath.Join(build, "batch_decode.so")
	writeText(t, filepath.Join(build, "build.ninja"), strings.Join([]string{
		"ninja_required_version = 1.3",
		"cxx = cc",
		"cuda_home = /usr/local/cuda",
		"cflags = -fPIC -O0 -I" + filepath.Join(site, "include") + " -I" + gen,
		"ldflags = -shared",
		"",
		"rule compile",
		"  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out",
		"  depfile = $out.d",
		"  deps = gcc",
		"",
		"rule link",
		"  command = $cxx $in $ldflags -o $out",
		"",
		"build " + obj + ": compile " + filepath.Join(gen, "batch_decode.c"),
		"",
		"build " + so + ": link " + obj,
		"default " + so,
		"",
	}, "\n"))
	return build
}

func writeText(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func needNinja(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"ninja", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH", tool)
		}
	}
}

// ninjaRun runs ninja in dir as FlashInfer does (-C dir -f build.ninja),
// with -n -d explain when dry; it returns the output.
func ninjaRun(t *testing.T, dir string, dry bool) string {
	t.Helper()
	args := []string{"-C", dir, "-f", filepath.Join(dir, "build.ninja")}
	if dry {
		args = append([]string{"-n", "-d", "explain"}, args...)
	}
	out, err := exec.Command("ninja", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ninja %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// copyKeepingTimes copies a tree as a load extracts one: same modes, same
// mtimes to the nanosecond, directories last.
func copyKeepingTimes(t *testing.T, from, to string) {
	t.Helper()
	var dirs []string
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		q := filepath.Join(to, rel)
		if fi.IsDir() {
			dirs = append(dirs, p)
			return os.MkdirAll(q, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(q, b, fi.Mode().Perm()); err != nil {
			return err
		}
		return os.Chtimes(q, time.Time{}, fi.ModTime())
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		fi, _ := os.Stat(dirs[i])
		rel, _ := filepath.Rel(from, dirs[i])
		os.Chtimes(filepath.Join(to, rel), time.Time{}, fi.ModTime())
	}
}

// mtimes maps every file under dir (relative) to its mtime.
func mtimes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out[rel] = fi.ModTime().UnixNano()
		}
		return nil
	})
	return out
}

// TestRelocateNinjaFlashInfer: a FlashInfer module built by the real
// ninja (and cc), copied to another path keeping mtimes and relocated by
// the flashinfer preset (staged, as load does), has nothing to build: no
// file's mtime changed, build.ninja, .ninja_log and .ninja_deps name the
// new path. Without the relocation, or with a source's mtime changed,
// ninja rebuilds: both rules are needed.
func TestRelocateNinjaFlashInfer(t *testing.T) {
	needNinja(t)
	p, err := Lookup("flashinfer")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	warm, site := filepath.Join(root, "warm"), filepath.Join(root, "site")
	build := flashinferTree(t, filepath.Join(warm, "flashinfer"), site)
	ninjaRun(t, build, false)
	if out := ninjaRun(t, build, true); !strings.Contains(out, "no work to do") {
		t.Fatalf("ninja in place is not up to date:\n%s", out)
	}
	relBuild, _ := filepath.Rel(warm, build)
	before := mtimes(t, warm)

	t.Run("relocated", func(t *testing.T) {
		staged, dest := filepath.Join(root, "staged"), filepath.Join(root, "job", "cache")
		copyKeepingTimes(t, warm, staged)
		if err := p.RelocateStaged(staged, dest, warm); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(dest), 0o755)
		if err := os.Rename(staged, dest); err != nil {
			t.Fatal(err)
		}
		if got := mtimes(t, dest); !equalMaps(got, before) {
			t.Errorf("mtimes changed by the relocation:\nbefore %v\nafter  %v", before, got)
		}
		for _, f := range []string{"build.ninja", ".ninja_log", ".ninja_deps"} {
			b, _ := os.ReadFile(filepath.Join(dest, relBuild, f))
			if bytes.Contains(b, []byte(warm+"/")) {
				t.Errorf("%s still names %s", f, warm)
			}
			if !bytes.Contains(b, []byte(dest+"/")) {
				t.Errorf("%s does not name %s", f, dest)
			}
		}
		out := ninjaRun(t, filepath.Join(dest, relBuild), true)
		if !strings.Contains(out, "no work to do") {
			t.Errorf("ninja would rebuild the relocated module:\n%s", out)
		}
	})
	t.Run("not relocated", func(t *testing.T) {
		dest := filepath.Join(root, "plain")
		copyKeepingTimes(t, warm, dest)
		// The manifest alone pointed at the new place, as FlashInfer
		// rewrites it: the log and deps still name the old outputs.
		p := filepath.Join(dest, relBuild, "build.ninja")
		b, _ := os.ReadFile(p)
		os.WriteFile(p, bytes.ReplaceAll(b, []byte(warm), []byte(dest)), 0o644)
		if out := ninjaRun(t, filepath.Join(dest, relBuild), true); strings.Contains(out, "no work to do") {
			t.Errorf("ninja found nothing to do without the log's relocation: the test shows nothing\n%s", out)
		}
	})
	t.Run("source mtime changed", func(t *testing.T) {
		staged := filepath.Join(root, "touched")
		copyKeepingTimes(t, warm, staged)
		if err := p.Relocate(staged, warm); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(staged, filepath.Dir(filepath.Dir(relBuild)), "generated", "batch_decode", "batch_decode.c")
		now := time.Now()
		if err := os.Chtimes(src, now, now); err != nil {
			t.Fatal(err)
		}
		if out := ninjaRun(t, filepath.Join(staged, relBuild), true); strings.Contains(out, "no work to do") {
			t.Errorf("ninja did not notice a newer source:\n%s", out)
		}
	})
}

func equalMaps(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestRelocateNinjaTorchExtension: an extension's build directory as
// torch.utils.cpp_extension writes it (outputs relative to the build
// directory, the source outside the cache) names no cache path: the
// relocation leaves every file as it was, and the real ninja finds
// nothing to do in the copy. With an include directory inside the cache
// (extra_include_paths), the commands change while the outputs' paths do
// not: the log's hashes are recomputed all the same.
func TestRelocateNinjaTorchExtension(t *testing.T) {
	needNinja(t)
	for _, inCache := range []bool{false, true} {
		t.Run(map[bool]string{false: "outside", true: "include in the cache"}[inCache], func(t *testing.T) {
			torchExtension(t, inCache)
		})
	}
}

func torchExtension(t *testing.T, includeInCache bool) {
	p, err := Lookup("torch-extensions")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	warm := filepath.Join(root, "warm")
	build := filepath.Join(warm, "torch_extensions", "kb_op")
	srcDir := filepath.Join(root, "src")
	os.MkdirAll(build, 0o755)
	os.MkdirAll(srcDir, 0o755)
	writeText(t, filepath.Join(srcDir, "op.c"), "int op(int x) { return x + 1; }\n")
	cflags := "-DTORCH_EXTENSION_NAME=kb_op -fPIC"
	if includeInCache {
		inc := filepath.Join(warm, "torch_extensions", "include")
		os.MkdirAll(inc, 0o755)
		cflags += " -I" + inc
	}
	writeText(t, filepath.Join(build, "build.ninja"), strings.Join([]string{
		"ninja_required_version = 1.3",
		"cxx = cc",
		"cflags = " + cflags,
		"post_cflags = ",
		"ldflags = -shared",
		"",
		"rule compile",
		"  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags",
		"  depfile = $out.d",
		"  deps = gcc",
		"",
		"rule link",
		"  command = $cxx $in $ldflags -o $out",
		"",
		"build op.o: compile " + filepath.Join(srcDir, "op.c"),
		"",
		"build kb_op.so: link op.o",
		"",
		"default kb_op.so",
		"",
	}, "\n"))
	ninjaRun(t, build, false)
	before := mtimes(t, warm)
	dest := filepath.Join(root, "job")
	copyKeepingTimes(t, warm, dest)
	if err := p.Relocate(dest, warm); err != nil {
		t.Fatal(err)
	}
	if got := mtimes(t, dest); !equalMaps(got, before) {
		t.Errorf("mtimes changed:\nbefore %v\nafter  %v", before, got)
	}
	for _, f := range []string{"build.ninja", ".ninja_log"} {
		a, _ := os.ReadFile(filepath.Join(build, f))
		b, _ := os.ReadFile(filepath.Join(dest, "torch_extensions", "kb_op", f))
		if bytes.Equal(a, b) == includeInCache {
			t.Errorf("%s rewritten: %v, want %v", f, !bytes.Equal(a, b), includeInCache)
		}
	}
	if out := ninjaRun(t, filepath.Join(dest, "torch_extensions", "kb_op"), true); !strings.Contains(out, "no work to do") {
		t.Errorf("ninja would rebuild the loaded extension:\n%s", out)
	}
}

// TestNinjaDepsBad: a damaged .ninja_deps is an error, never a panic;
// one of another version is left alone.
func TestNinjaDepsBad(t *testing.T) {
	r := ninjaRelocation{from: "/w", to: "/d"}
	head := append([]byte("# ninjadeps\n"), 4, 0, 0, 0)
	for _, tc := range []struct {
		name string
		b    []byte
		err  error
	}{
		{"not deps", []byte("hello"), ErrNinjaFile},
		{"truncated header", append(append([]byte{}, head...), 1, 2), ErrNinjaFile},
		{"size past the end", append(append([]byte{}, head...), 0xf0, 0, 0, 0), ErrNinjaFile},
		{"odd size", append(append([]byte{}, head...), 3, 0, 0, 0, 'a', 'b', 'c'), ErrNinjaFile},
		{"other version", append([]byte("# ninjadeps\n"), 9, 0, 0, 0, 1), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := r.deps(tc.b)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err == nil && !bytes.Equal(out, tc.b) {
				t.Errorf("rewrote %q", out)
			}
		})
	}
}

func FuzzNinjaDeps(f *testing.F) {
	rec := binary.LittleEndian.AppendUint32(nil, 8)
	rec = append(rec, "/w/a"...)
	rec = binary.LittleEndian.AppendUint32(rec, ^uint32(0))
	f.Add(append(append([]byte("# ninjadeps\n"), 4, 0, 0, 0), rec...))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := ninjaRelocation{from: "/w", to: "/dest/longer"}
		if out, err := r.deps(b); err == nil {
			// Relocating back gives the input's paths again.
			back, err := ninjaRelocation{from: "/dest/longer", to: "/w"}.deps(out)
			if err != nil {
				t.Fatalf("relocated deps do not parse: %v", err)
			}
			_ = back
		}
	})
}
