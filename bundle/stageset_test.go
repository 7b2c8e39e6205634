package bundle

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Staging a set extracts its merged view: later layers win by name and
// per cache unit, displaced files are gone, and the install record names
// every layer, with the set's content digest and each entry's layer.
func TestStageSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.kbundle")
	h := strings.Repeat("Q", 52)
	writeLayer(t, path, map[string]string{"n/f.nbi": "i1", "n/f.1.nbc": "c1", "n/h.nbi": "h", "triton/" + h + "/a": "a1", "triton/" + h + "/b": "b1", "plain": "p1"})
	writeLayer(t, path, map[string]string{"n/f.nbi": "i2", "n/f.2.nbc": "c2", "triton/" + h + "/a": "a2"})
	writeLayer(t, path, map[string]string{"plain": "p3"})
	s, err := OpenSet(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dest := filepath.Join(dir, "dest")
	st, err := s.Read[0].Stage(context.Background(), dest, s.StageOptions(ExtractOptions{Jobs: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Install(); err != nil {
		t.Fatal(err)
	}
	st.Commit()
	want := setContent(t, s, CacheUnit)
	got := map[string]string{}
	filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != InstalledMarker {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dest, p)
			got[rel] = string(b)
		}
		return nil
	})
	if !equalMaps(got, want) {
		t.Errorf("tree %v, want the merged view %v", got, want)
	}
	if _, ok := got["n/f.1.nbc"]; ok {
		t.Errorf("n/f.1.nbc of the base survived its unit's replacement")
	}
	if _, ok := got["triton/"+h+"/b"]; ok {
		t.Errorf("the base's file of a Triton unit a layer replaced survived")
	}
	rec, err := ReadInstallRecord(dest)
	if err != nil {
		t.Fatal(err)
	}
	if cd := FormatDigest(s.ContentDigest(CacheUnit)); rec.ContentDigest != cd || len(rec.Layers) != 3 {
		t.Errorf("record: content %s with %d layers, want %s with 3", rec.ContentDigest, len(rec.Layers), cd)
	}
	for _, e := range rec.Entries {
		if e.Name == "plain" && e.Layer != 2 || e.Name == "n/h.nbi" && e.Layer != 0 || e.Name == "n/f.2.nbc" && e.Layer != 1 {
			t.Errorf("%s recorded from layer %d", e.Name, e.Layer)
		}
	}
	if ch, err := CompareTree(dest, rec); err != nil || !ch.Same() {
		t.Errorf("tree against its record: %v, %v", ch, err)
	}
}

// A read-only (0555) directory of the base does not stop a later layer
// from changing what it holds (a new file, a changed one, a kind change
// below it or of it): the staged set's directories get their modes once
// every layer is in. Run as uid 65534 when root (root writes any
// directory whatever its mode).
func TestStageSetReadOnlyDir(t *testing.T) {
	if os.Geteuid() == 0 && os.Getenv("KBUNDLE_TEST_RODIR_CHILD") == "" {
		dir, err := os.MkdirTemp("", "kbundle-rodir-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		bin, err := os.ReadFile(os.Args[0]) // the build directory is private
		if err != nil {
			t.Fatal(err)
		}
		exe := filepath.Join(dir, "bundle.test")
		if err := os.WriteFile(exe, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "-test.run", "^TestStageSetReadOnlyDir$", "-test.v")
		cmd.Env = append(os.Environ(), "KBUNDLE_TEST_RODIR_CHILD=1", "HOME="+dir, "TMPDIR="+os.TempDir())
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("as uid 65534: %v\n%s", err, out)
		}
		if !bytes.Contains(out, []byte("--- PASS")) {
			t.Fatalf("as uid 65534: the child did not run the test:\n%s", out)
		}
		return
	}
	cases := []struct {
		name  string
		layer []string
		want  map[string]string
		mode  fs.FileMode // r's, when a directory
	}{
		{"a new file", []string{"r/b=new"}, map[string]string{"r": "/", "r/a": "a", "r/b": "new"}, 0o755},
		{"a changed file", []string{"r/a=changed"}, map[string]string{"r": "/", "r/a": "changed"}, 0o755},
		{"a file below becomes a directory", []string{"r/a/x=kind"}, map[string]string{"r": "/", "r/a": "/", "r/a/x": "kind"}, 0o755},
		{"the directory becomes a file", []string{"r=file"}, map[string]string{"r": "file"}, 0},
		{"a sibling only", []string{"s=s"}, map[string]string{"r": "/", "r/a": "a", "s": "s"}, 0o555},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			set := filepath.Join(dir, "s.kbundle")
			if _, err := WriteLayer(context.Background(), set, nil, func(w *Writer) error {
				if err := w.Mkdir("r", 0o555, time.Unix(1, 0)); err != nil {
					return err
				}
				return w.WriteFile("r/a", 0o644, time.Unix(1, 0), []byte("a"))
			}); err != nil {
				t.Fatal(err)
			}
			writeSpec(t, set, tc.layer...)
			s, err := OpenSet(set, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			dest := filepath.Join(dir, "dest")
			st, err := s.Read[0].Stage(context.Background(), dest, s.StageOptions(ExtractOptions{}))
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if err := st.Install(); err != nil {
				t.Fatal(err)
			}
			st.Commit()
			if got := treeSpec(t, dest); !equalMaps(got, tc.want) {
				t.Errorf("loaded tree %v, want %v", got, tc.want)
			}
			if fi, err := os.Lstat(filepath.Join(dest, "r")); tc.mode != 0 && (err != nil || fi.Mode().Perm() != tc.mode) {
				t.Errorf("r: %v (%v), want mode %v", fi.Mode(), err, tc.mode)
			}
			rec, err := ReadInstallRecord(dest)
			if err != nil {
				t.Fatal(err)
			}
			if ch, err := CompareTree(dest, rec); err != nil || !ch.Same() {
				t.Errorf("loaded tree against its record: %v, %v", ch, err)
			}
			os.Chmod(filepath.Join(dest, "r"), 0o755) // for t.TempDir's removal
		})
	}
}
