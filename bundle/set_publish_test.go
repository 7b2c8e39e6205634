package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// In a group's shared directory (group-writable, setgid) the layer
// directory is made group-writable and setgid too, so that the other
// members can add their layers; elsewhere it is 0755.
func TestLayerDirMode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parent fs.FileMode
		want   fs.FileMode
	}{
		{"private", 0o700, 0o755},
		{"group set", 0o775 | fs.ModeSetgid, 0o775 | fs.ModeSetgid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "set")
			os.Mkdir(dir, 0o700)
			if err := os.Chmod(dir, tc.parent); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "cache.kbundle")
			writeLayer(t, path, map[string]string{"a": "1"})
			writeLayer(t, path, map[string]string{"b": "2"})
			fi, err := os.Stat(LayerDir(path))
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() & (fs.ModePerm | fs.ModeSetgid); got != tc.want {
				t.Errorf("%s is %v, want %v", LayerDir(path), got, tc.want)
			}
		})
	}
}

// Two writers that list the layer directory before either links (as two
// nodes do at the same moment, or with a listing their client cached)
// get two numbers: the claim of a number, not the layer's name (which
// holds its content digest), is what link(2) makes exclusive.
func TestWriteLayerConcurrentNumbers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.kbundle")
	writeLayer(t, path, map[string]string{"base": "0"})
	var other *Published
	layerListed = func() {
		layerListed = nil // A has listed: B writes and publishes now
		other = writeLayer(t, path, map[string]string{"b": "from B"})
	}
	t.Cleanup(func() { layerListed = nil })
	mine := writeLayer(t, path, map[string]string{"a": "from A"})
	if other == nil || mine.Seq == other.Seq {
		t.Fatalf("A published %s, B %v: one number each wanted", mine.Path, other)
	}
	layers, _ := ListLayers(path, 0)
	if len(layers) != 2 || layers[0].Seq != 1 || layers[1].Seq != 2 || layers[0].Path != other.Path {
		t.Errorf("layers %v, want B's as 1, A's as 2", layers)
	}
	claims, _ := filepath.Glob(LayerDir(path) + "/.*.claim")
	temps, _ := filepath.Glob(filepath.Dir(path) + "/" + tempTag + "*")
	if len(claims) != 2 || len(temps) != 0 {
		t.Errorf("claims %q, temporaries %q: want one claim per layer and no temporary", claims, temps)
	}
}

// setFiles is the set's merged view at path (cache units as harvest
// writes them), file by file.
func setFiles(t *testing.T, path string) map[string]string {
	t.Helper()
	s, err := OpenSet(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return setContent(t, s, CacheUnit)
}

// mergeAll merges the set past the grace twice: the second merge removes
// what the first base folded.
func mergeAll(t *testing.T, path string) {
	t.Helper()
	for range 2 {
		if _, err := MergeSet(context.Background(), path, &MergeOptions{Grace: time.Nanosecond, Unit: CacheUnit}); err != nil {
			t.Fatal(err)
		}
	}
}

// H2 (the review's h2-claim-race.sh): a harvest that has claimed layer
// number 1 but not linked its layer yet is overtaken by a harvest that
// publishes layer 2 and a merge that folds up to 2. Its layer, linked
// after, is in view (the base names the layers it folded, not a number
// below which every layer is skipped), and no merge removes it before it
// is folded.
func TestWriteLayerClaimedBeforeMerge(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.kbundle")
	writeLayer(t, path, map[string]string{"base": "base"})
	var merged *MergeResult
	opt := &LayerOptions{step: func(s string) {
		if s != "claimed" || merged != nil {
			return
		}
		writeLayer(t, path, map[string]string{"job2.k": "job 2 kernel"})
		var err error
		if merged, err = MergeSet(ctx, path, &MergeOptions{Unit: CacheUnit}); err != nil {
			t.Fatal(err)
		}
	}}
	p, err := WriteLayer(ctx, path, opt, func(w *Writer) error {
		return w.WriteFile("job1.k", 0o644, time.Unix(1, 0), []byte("job 1 kernel"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if merged == nil || merged.Folded != 1 || p.Seq != 1 {
		t.Fatalf("layer %+v, merge %+v: want layer 1 linked after a merge that folded layer 2", p, merged)
	}
	want := map[string]string{"base": "base", "job1.k": "job 1 kernel", "job2.k": "job 2 kernel"}
	if got := setFiles(t, path); !equalMaps(got, want) {
		t.Fatalf("the set after the race holds %v, want %v", got, want)
	}
	mergeAll(t, path)
	if got := setFiles(t, path); !equalMaps(got, want) {
		t.Errorf("after two merges past the grace the set holds %v, want %v", got, want)
	}
	if ls, _ := ListLayers(path, 0); len(ls) != 0 {
		t.Errorf("layers left after two merges past the grace: %v", ls)
	}
}

// H3 (the review's h3-merge-race.sh): a slow merge M_b that read "base +
// layer 1" is overtaken by a harvest (layer 2), a merge M_a (folds 1..2)
// and, past the grace, a merge M_c that removes layers 1 and 2. M_b then
// finds another base at PATH than the one it read: it installs nothing
// and merges again from the set as it is. With RENAME_EXCHANGE and
// without (NFS, sshfs).
func TestMergeNotOverNewerBase(t *testing.T) {
	for _, tc := range []struct {
		name       string
		noExchange bool
	}{{"exchange", false}, {"rename", true}} {
		t.Run(tc.name, func(t *testing.T) {
			noExchange = tc.noExchange
			t.Cleanup(func() { noExchange = false })
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "s.kbundle")
			writeLayer(t, path, map[string]string{"base": "base"})
			writeLayer(t, path, map[string]string{"A.k": "A"})
			var mc *MergeResult
			tries := 0
			opt := &MergeOptions{Unit: CacheUnit}
			opt.step = func(s string) {
				if s == "merge-opened" {
					tries++
				}
				if s != "merge-written" || tries > 1 {
					return
				}
				writeLayer(t, path, map[string]string{"B.k": "B"})
				if _, err := MergeSet(ctx, path, &MergeOptions{Unit: CacheUnit}); err != nil { // M_a
					t.Fatal(err)
				}
				old := time.Now().Add(-time.Hour)
				os.Chtimes(path, old, old)
				var err error
				if mc, err = MergeSet(ctx, path, &MergeOptions{Unit: CacheUnit, Grace: time.Minute}); err != nil { // M_c
					t.Fatal(err)
				}
			}
			mb, err := MergeSet(ctx, path, opt)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"base": "base", "A.k": "A", "B.k": "B"}
			if got := setFiles(t, path); !equalMaps(got, want) {
				t.Errorf("the set holds %v after M_b (%+v), want %v", got, mb, want)
			}
			if mc == nil || len(mc.Removed) != 2 || tries != 2 {
				t.Errorf("M_c %+v, M_b tried %d times: want M_c to remove layers 1 and 2, M_b to merge again", mc, tries)
			}
			assertNoTemps(t, filepath.Dir(path))
		})
	}
}

// installBase puts a base only where the base it read still is: over
// another (installed meanwhile) or where the base was removed, or where
// one appeared for a set that had none, it installs nothing
// (ErrSetChanged) and leaves both files as they were.
func TestInstallBase(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []bool{false, true} {
		for _, tc := range []struct {
			name   string
			change func(path string) // between the read and the install
			ok     bool
		}{
			{"unchanged", func(string) {}, true},
			{"another base", func(path string) { os.Rename(writeTemp(t, path, "theirs"), path) }, false},
			{"base removed", func(path string) { os.Remove(path) }, false},
		} {
			t.Run(fmt.Sprintf("%s/noExchange=%v", tc.name, mode), func(t *testing.T) {
				noExchange = mode
				t.Cleanup(func() { noExchange = false })
				path := filepath.Join(t.TempDir(), "s.kbundle")
				os.Rename(writeTemp(t, path, "read"), path)
				held, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer held.Close()
				tc.change(path)
				before, _ := os.ReadFile(path)
				tmp, err := newTempFile(filepath.Dir(path))
				if err != nil {
					t.Fatal(err)
				}
				defer func() { dropTemp(tmp.Name()); tmp.Close() }()
				tmp.WriteString("ours")
				err = installBase(tmp.Name(), path, held)
				after, _ := os.ReadFile(path)
				switch {
				case tc.ok && (err != nil || string(after) != "ours"):
					t.Errorf("install: %v; PATH holds %q, want ours", err, after)
				case !tc.ok && (!errors.Is(err, ErrSetChanged) || string(after) != string(before)):
					t.Errorf("install: %v (want ErrSetChanged); PATH holds %q, want %q", err, after, before)
				}
				if !tc.ok {
					if b, err := os.ReadFile(tmp.Name()); err != nil || string(b) != "ours" {
						t.Errorf("our temporary holds %q (%v), want ours, for the caller to remove", b, err)
					}
				}
			})
		}
		_ = ctx
	}
	// A set without a base: installed by link(2), never over a base
	// that appeared meanwhile.
	path := filepath.Join(t.TempDir(), "s.kbundle")
	os.Rename(writeTemp(t, path, "appeared"), path)
	tmp, err := newTempFile(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { dropTemp(tmp.Name()); tmp.Close() }()
	if err := installBase(tmp.Name(), path, nil); !errors.Is(err, ErrSetChanged) {
		t.Errorf("install where a base appeared: %v, want ErrSetChanged", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "appeared" {
		t.Errorf("PATH holds %q, want the base that appeared", b)
	}
}

// writeTemp writes content to a new file beside path and returns it.
func writeTemp(t *testing.T, path, content string) string {
	t.Helper()
	f, err := os.CreateTemp(filepath.Dir(path), "x")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(content)
	f.Close()
	return f.Name()
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tempTag) {
			t.Errorf("temporary left: %s", de.Name())
		}
	}
}

// H7 (the review's h7-base-missing.sh): a set whose base is gone but
// whose layers remain gets the next harvest's layer above them, not a
// base below them: the kernel the job recompiled wins.
func TestWriteLayerBaseGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.kbundle")
	writeLayer(t, path, map[string]string{"base": "base"})
	writeLayer(t, path, map[string]string{"W": "W version 1"})
	if err := os.Remove(path); err != nil { // a scratch purge
		t.Fatal(err)
	}
	p := writeLayer(t, path, map[string]string{"W": "W version 2"})
	if p.Base || p.Seq != 2 {
		t.Fatalf("published %+v, want layer 2", p)
	}
	if got := setFiles(t, path); got["W"] != "W version 2" {
		t.Errorf("the set holds %v, want W version 2", got)
	}
	mergeAll(t, path)
	if got := setFiles(t, path); got["W"] != "W version 2" {
		t.Errorf("merged, the set holds %v, want W version 2", got)
	}
	// Claims alone (a writer killed after its claim) are a set too.
	path = filepath.Join(t.TempDir(), "s.kbundle")
	os.Mkdir(LayerDir(path), 0o755)
	os.WriteFile(claimName(LayerDir(path), 1), nil, 0o644)
	if p := writeLayer(t, path, map[string]string{"f": "f"}); p.Base || p.Seq != 2 {
		t.Errorf("published beside a claim: %+v, want layer 2", p)
	}
}

// X7 (the review's x7-claims.sh): names planted in PATH.d cost a harvest
// nothing: a hundred claims are skipped in one listing (not one number
// per try), and a layer name of an owner the writer does not trust, even
// numbered 999999, takes its number but does not move the next one. The
// writer's own (or a trusted owner's) layer at the limit is "layer
// numbers exhausted", naming the file and its owner.
func TestWriteLayerPlantedNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		plant   func(dir string) error
		uid     int // the planted files' owner (-1: ours)
		wantSeq int
		wantErr string
	}{
		{"100 claims", func(dir string) error {
			for i := 2; i <= 101; i++ {
				if err := os.WriteFile(claimName(dir, i), nil, 0o644); err != nil {
					return err
				}
			}
			return nil
		}, -1, 102, ""},
		{"100 claims of another user", func(dir string) error {
			for i := 2; i <= 101; i++ {
				if err := os.WriteFile(claimName(dir, i), nil, 0o644); err != nil {
					return err
				}
			}
			return nil
		}, 4242, 102, ""},
		{"layer 999999 of another user", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "999999-0000000000000000.kbundle"), nil, 0o644)
		}, 4242, 2, ""},
		{"layer 999999 of ours", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "999999-0000000000000000.kbundle"), nil, 0o644)
		}, -1, 0, "999999-0000000000000000.kbundle (owner "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.uid >= 0 && os.Getuid() != 0 {
				t.Skip("needs root (chown)")
			}
			path := filepath.Join(t.TempDir(), "s.kbundle")
			writeLayer(t, path, map[string]string{"base": "base"})
			writeLayer(t, path, map[string]string{"one": "1"})
			if err := tc.plant(LayerDir(path)); err != nil {
				t.Fatal(err)
			}
			if tc.uid >= 0 {
				des, _ := os.ReadDir(LayerDir(path))
				for _, de := range des {
					if !strings.HasPrefix(de.Name(), "000001") && !strings.HasPrefix(de.Name(), ".000001") {
						os.Lchown(filepath.Join(LayerDir(path), de.Name()), tc.uid, tc.uid)
					}
				}
			}
			tries := 0
			p, err := WriteLayer(context.Background(), path, &LayerOptions{step: func(s string) {
				if s == "listed" {
					tries++
				}
			}}, func(w *Writer) error { return w.WriteFile("two", 0o644, time.Unix(1, 0), []byte("2")) })
			if tc.wantErr != "" {
				if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Seq != tc.wantSeq || tries != 1 {
				t.Errorf("published as %d after %d tries, want %d at the first", p.Seq, tries, tc.wantSeq)
			}
		})
	}
}

// A set whose PATH is a symlink to its base merges as before: the new
// base replaces the symlink.
func TestMergeSymlinkedBase(t *testing.T) {
	for _, mode := range []bool{false, true} {
		noExchange = mode
		t.Cleanup(func() { noExchange = false })
		dir := t.TempDir()
		path := filepath.Join(dir, "s.kbundle")
		writeLayer(t, filepath.Join(dir, "v1.kbundle"), map[string]string{"base": "base"})
		if err := os.Symlink("v1.kbundle", path); err != nil {
			t.Fatal(err)
		}
		writeLayer(t, path, map[string]string{"f": "f"})
		if _, err := MergeSet(context.Background(), path, &MergeOptions{Unit: CacheUnit}); err != nil {
			t.Fatalf("noExchange=%v: %v", mode, err)
		}
		if got := setFiles(t, path); !equalMaps(got, map[string]string{"base": "base", "f": "f"}) {
			t.Errorf("noExchange=%v: the set holds %v", mode, got)
		}
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("noExchange=%v: PATH is %v (%v), want the new base", mode, fi.Mode(), err)
		}
	}
}

// FuzzParseFold: a base's fold metadata either parses, and then joining
// its names back (as a merge writes them) parses to the same fold, or is
// a format error naming the base; never a panic.
//
//	go test -run '^$' -fuzz '^FuzzParseFold$' -fuzztime 10s ./bundle/
func FuzzParseFold(f *testing.F) {
	f.Add("3", "000001-0123456789abcdef.kbundle,000003-0123456789abcdef.kbundle", true)
	f.Add("", "", true)
	f.Add("7", "", false)
	f.Add("-1", "x", true)
	f.Add("2", ",000001-0123456789abcdef.kbundle", true)
	f.Fuzz(func(t *testing.T, top, names string, hasNames bool) {
		meta := map[string]string{MetaSetFolded: top}
		if hasNames {
			meta[MetaSetFoldedLayers] = names
		}
		fold, err := parseFold(meta, "base")
		if err != nil {
			if !errors.Is(err, ErrFormat) || !strings.HasPrefix(err.Error(), "base: ") {
				t.Fatalf("error %v: want ErrFormat naming the base", err)
			}
			return
		}
		if !hasNames {
			if fold.names != nil {
				t.Fatalf("no %s, but names %v", MetaSetFoldedLayers, fold.names)
			}
			return
		}
		var ns []string
		for n := range fold.names {
			ns = append(ns, n)
		}
		slices.Sort(ns)
		again, err := parseFold(map[string]string{MetaSetFolded: top, MetaSetFoldedLayers: strings.Join(ns, ",")}, "base")
		if err != nil || again.top != fold.top || len(again.names) != len(fold.names) {
			t.Fatalf("written back: %+v, %v; want %+v", again, err, fold)
		}
		for n := range fold.names {
			seq, _ := strconv.Atoi(n[:6])
			if !again.skips(SetLayer{Path: "d/" + n, Seq: seq}) {
				t.Fatalf("%s not skipped after writing back", n)
			}
		}
	})
}
