package harvest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
)

// restamp rewrites dest's install record as installed at t on host.
func restamp(t *testing.T, dest string, at time.Time, host string) {
	t.Helper()
	p := filepath.Join(dest, bundle.InstalledMarker)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`"installed":"[^"]*"`).ReplaceAll(b, []byte(`"installed":"`+at.UTC().Format(time.RFC3339Nano)+`"`))
	if host != "" {
		b = regexp.MustCompile(`,"host":"[^"]*"`).ReplaceAll(b, nil)
		b = regexp.MustCompile(`"installed":`).ReplaceAll(b, []byte(`"host":"`+host+`","installed":`))
	}
	if err := os.WriteFile(p, b, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.ReadInstallRecord(dest); err != nil {
		t.Fatalf("restamped record: %v", err)
	}
}

// extractTo installs set's view at dest, as a load does.
func extractTo(t *testing.T, set, dest string) {
	t.Helper()
	s, err := bundle.OpenSet(set, &bundle.OpenOptions{Trusted: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Read[len(s.Read)-1].Extract(context.Background(), dest, nil); err != nil {
		t.Fatal(err)
	}
}

// TestFindDest: the DEST a leader harvests when none was given (U33):
// the job's default when it exists, else the newest tree of the user's
// from the set on this host; a tie is refused naming both; nothing from
// the set says what was looked for.
func TestFindDest(t *testing.T) {
	dir := t.TempDir()
	setA, setB := filepath.Join(dir, "a.kbundle"), filepath.Join(dir, "b.kbundle")
	install(t, setA, filepath.Join(dir, "scratch-a"), 0, map[string]string{"k": "a"})
	install(t, setB, filepath.Join(dir, "scratch-b"), 0, map[string]string{"k": "b"})
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o755)
	prefix := filepath.Join(tmp, "kbundle-u-")
	now := time.Now()
	tree := func(name, set string, age time.Duration, host string) string {
		d := prefix + name
		extractTo(t, set, d)
		restamp(t, d, now.Add(-age), host)
		return d
	}
	job1 := tree("job1", setA, 100*time.Second, "kbn0")
	job2 := tree("job2", setA, 50*time.Second, "kbn0")
	tree("job3", setB, 0, "kbn0")
	tree("job4", setA, 0, "kbn9") // another host's (a shared TMPDIR)
	fake := tree("job5.node1", setA, 0, "kbn0")
	os.Symlink(job2, prefix+"job6")         // a symlink is never followed
	os.Mkdir(prefix+"job7", 0o755)          // no record
	os.WriteFile(prefix+"job8", nil, 0o644) // not a directory

	for _, tc := range []struct {
		name, dest, suffix, set string
		want, note              string // note: a part of the note ("": none)
	}{
		{"the job's own", job1, "", setA, job1, ""},
		{"the newest from the set", prefix + "new", "", setA, job2, "the newest tree loaded from " + setA},
		{"any set", prefix + "new", "", "", prefix + "job3", "the newest tree loaded from any set"},
		{"a fake node's", prefix + "new.node1", ".node1", setA, fake, "newest"},
		{"none from the set", prefix + "new", "", filepath.Join(dir, "c.kbundle"), prefix + "new", "nothing loaded here from " + filepath.Join(dir, "c.kbundle")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, note, _, err := findDest(tc.dest, prefix, tc.suffix, tc.set, "kbn0")
			if err != nil || got != tc.want || (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
				t.Errorf("findDest(%s) = %s, %q, %v; want %s, %q", tc.dest, got, note, err, tc.want, tc.note)
			}
		})
	}
	t.Run("a tie", func(t *testing.T) {
		restamp(t, job1, now.Add(-49*time.Second), "kbn0")
		_, _, _, err := findDest(prefix+"new", prefix, "", setA, "kbn0")
		var r *Refusal
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), job1) || !strings.Contains(err.Error(), job2) || !errors.As(err, &r) || r.Fix != (Fix{Field: FixDest}) {
			t.Errorf("a tie: %v, want ErrRefused naming %s and %s", err, job1, job2)
		}
	})
}

// TestHarvestFindsTheLoad: README item 6 under a bare mpirun (U33): the
// load's launch had another job id than the harvest's, so the default
// DEST names a directory that does not exist; each node harvests the tree
// it loaded from the set, named in its report; without a set given, the
// one the DESTs were loaded from (U36); a set other than the DESTs' is
// refused (U35), the same on every rank.
func TestHarvestFindsTheLoad(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "cache.kbundle")
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o755)
	prefix := filepath.Join(tmp, "kbundle-u-")
	install(t, set, prefix+"load", 2, map[string]string{"numba/f.nbi": "i", "numba/f.1.nbc": "c"})
	write(t, prefix+"load.node0", "numba/g.nbi", "g")
	write(t, prefix+"load.node1", "numba/h.nbi", "h")

	for _, given := range []string{set, ""} {
		sums, errs := runEach(given, prefix+"harvest", 2, 1, func(p *Plan) { p.Search, p.DryRun = prefix, true })
		for r, err := range errs {
			if err != nil {
				t.Fatalf("bundle %q: rank %d: %v", given, r, err)
			}
		}
		s := sums[0]
		if s.Set != set || s.Files != 2 {
			t.Fatalf("bundle %q: %+v, want 2 files for %s", given, s, set)
		}
		for n, nr := range s.Nodes {
			want := fmt.Sprintf("%sload.node%d", prefix, n)
			if nr.MissingDir || nr.Dest != want || !strings.Contains(nr.DestNote, "newest") {
				t.Errorf("node %d: %+v, want DEST %s found", n, nr, want)
			}
		}
	}

	// Another set than the trees': found nothing, and said which set they
	// were loaded from; with the DEST given, refused.
	other := filepath.Join(dir, "other.kbundle")
	sums, errs := runEach(other, prefix+"harvest", 2, 1, func(p *Plan) { p.Search = prefix })
	if n := sums[0].Nodes[0]; errs[0] != nil || !n.MissingDir || !strings.Contains(n.DestNote, "was loaded from "+set+")") || n.OtherSet != set {
		t.Errorf("harvest into another set: %v; node 0: %+v, want no DEST and the set %s named", errs[0], n, set)
	}
	_, errs = runEach(other, prefix+"load", 2, 1, func(*Plan) {})
	for r, err := range errs {
		var rf *Refusal
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "was loaded from "+set) || err.Error() != errs[0].Error() ||
			!errors.As(err, &rf) || rf.Fix != (Fix{Field: FixBundle, Value: set}) {
			t.Errorf("rank %d: harvest into another set: %v, want ErrRefused naming %s", r, err, set)
		}
	}
	if _, err := os.Lstat(other); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused harvest wrote %s", other)
	}
}

// TestHarvestNothingLoaded: with no tree from the set anywhere, every
// node says what it looked for, and nothing is written.
func TestHarvestNothingLoaded(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "cache.kbundle")
	prefix := filepath.Join(dir, "kbundle-u-")
	sums, errs := runEach(set, prefix+"harvest", 2, 1, func(p *Plan) { p.Search = prefix })
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	for _, n := range sums[0].Nodes {
		if !n.MissingDir || !strings.Contains(n.DestNote, "nothing loaded here from "+set) || n.OtherSet != "" || sums[0].Layer != "" {
			t.Errorf("node %s: %+v, layer %q", n.Host, n, sums[0].Layer)
		}
	}
}

// TestHarvestSetFolderGone: the set's folder removed since the load (or
// a full file system): the harvest fails on every rank naming the set,
// not the temporary beside it, and says that nothing was published and
// DEST keeps the kernels (U48).
func TestHarvestSetFolderGone(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "kcache", "cache.kbundle")
	os.Mkdir(filepath.Dir(set), 0o755)
	dest := filepath.Join(dir, "dest")
	installMissing(t, set, dest, 2)
	write(t, dest+".node1", "numba/f.nbi", "compiled")
	os.RemoveAll(filepath.Dir(set))
	_, errs := runEach(set, dest, 2, 1, func(*Plan) {})
	for r, err := range errs {
		if err == nil || !strings.HasPrefix(err.Error(), "harvest: cannot write a layer of "+set) || strings.Contains(err.Error(), ".kbundle-tmp-") ||
			!strings.Contains(err.Error(), "nothing was published, and each node's DEST keeps what the job compiled") || err.Error() != errs[0].Error() {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dest+".node1", "numba", "f.nbi")); err != nil {
		t.Error(err)
	}
}

// TestHarvestSaysWhatItReplaces: a job that turned a directory of DEST
// into a file, and a file into a directory: the layer's view replaces
// the set's (the newest layer wins, with the whole subtree), and the
// report says what it drops (H1 of the 2026-12-01b review).
func TestHarvestSaysWhatItReplaces(t *testing.T) {
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 1, map[string]string{"numba/sub/k1": "a", "numba/sub/k2": "b", "numba/k3": "c", "x": "file"})
	d := dest + ".node0"
	os.RemoveAll(filepath.Join(d, "numba", "sub"))
	write(t, d, "numba/sub", "now a file")
	os.Remove(filepath.Join(d, "x"))
	write(t, d, "x/y", "now a directory")
	s := run(t, set, dest, 1, 1)[0]
	want := []string{"numba/sub/ (2 files: a directory in the set, a file in this job's DEST)", "x (a file in the set, a directory in this job's DEST)"}
	if s.Layer == "" || !slices.Equal(s.Replaced, want) {
		t.Fatalf("layer %q, replaced %q, want %q", s.Layer, s.Replaced, want)
	}
	o, err := bundle.OpenSet(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var names []string
	for _, e := range o.Merged(bundle.CacheUnit) {
		names = append(names, e.Name)
	}
	if !slices.Contains(names, "numba/sub") || slices.Contains(names, "numba/sub/k1") || !slices.Contains(names, "x/y") || !slices.Contains(names, "numba/k3") {
		t.Errorf("the set's view %q", names)
	}
}
