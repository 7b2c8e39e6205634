package harvest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"golang.org/x/sys/unix"
)

// runPlan is run with the plan changed by edit (job 42).
func runPlan(t *testing.T, set, dest string, nodes, ranksPerNode int, edit func(*Plan)) *Summary {
	t.Helper()
	sums, errs := runEach(set, dest, nodes, ranksPerNode, func(p *Plan) { p.Job = "42"; edit(p) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return sums[0]
}

// unitFiles are three Numba units of 30 bytes each (index and one data
// file) and a Triton unit of 40.
var (
	tri       = "triton/" + strings.Repeat("K", 52) + "/"
	unitFiles = map[string]string{
		"numba/a-1.py312.nbi": "aaaaaaaaaa", "numba/a-1.py312.1.nbc": strings.Repeat("A", 20),
		"numba/b-1.py312.nbi": "bbbbbbbbbb", "numba/b-1.py312.1.nbc": strings.Repeat("B", 20),
		"numba/c-1.py312.nbi": "cccccccccc", "numba/c-1.py312.1.nbc": strings.Repeat("C", 20),
		tri + "k.cubin": strings.Repeat("k", 20), tri + "__grp__k.json": strings.Repeat("g", 20),
	}
)

func read(t *testing.T, p string) {
	t.Helper()
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
}

func skipNoatime(t *testing.T, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Flags&unix.ST_NOATIME != 0 {
		t.Skip("the temporary directory is mounted noatime (or cannot tell): the job's reads cannot be seen here")
	}
}

// What the job read (a file's access time past the install, on this
// machine's relatime or strictatime temporary directory, for real) is
// sent to rank 0 per unit and recorded in a use record of the set; what
// harvest itself reads (a changed file, hashed) does not count.
func TestHarvestRecordsUse(t *testing.T) {
	dir := t.TempDir()
	skipNoatime(t, dir)
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 2, unitFiles)
	time.Sleep(20 * time.Millisecond) // the reads come after the install time
	before := time.Now()
	read(t, dest+".node1/numba/a-1.py312.1.nbc") // a: read on node 1 only
	read(t, dest+".node0/"+tri+"k.cubin")        // the Triton unit: one of its files
	write(t, dest+".node0", "numba/d-1.py312.nbi", "new")
	// b's data file rewritten with its bytes: harvest hashes it (a new
	// mtime), which must not count as the job's read of b; d is new (in
	// the layer, not a unit of the set read).
	b0 := filepath.Join(dest+".node0", "numba/b-1.py312.1.nbc")
	os.Chtimes(b0, time.Unix(100, 0), time.Now())
	s := runPlan(t, set, dest, 2, 1, func(*Plan) {})
	if s.UnitsUsed != 2 || s.Nodes[0].UnitsUsed != 1 || s.Nodes[1].UnitsUsed != 1 || s.UseRecord == "" || len(s.UsageUnknown) != 0 {
		t.Fatalf("summary: used %d (%+v), record %q, unknown %q", s.UnitsUsed, s.Nodes, s.UseRecord, s.UsageUnknown)
	}
	u, err := bundle.ReadUses(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := u.Units["numba/a-1.py312.nb*"]
	// (Access times come from the kernel's coarse clock: up to a tick
	// behind time.Now.)
	if len(u.Units) != 2 || a.Time.Before(before.Add(-50*time.Millisecond)) || a.Time.After(time.Now()) || a.Unknown || u.Units[tri].Time.IsZero() {
		t.Errorf("recorded %+v, want a (read at %v) and %s", u.Units, before, tri)
	}
	if at := atime(t, b0); !at.Equal(time.Unix(100, 0)) {
		t.Errorf("harvest's read of b moved its access time to %v", at)
	}
	// A dry run records nothing.
	read(t, dest+".node0/numba/c-1.py312.nbi")
	if s := runPlan(t, set, dest, 2, 1, func(p *Plan) { p.DryRun = true }); s.UseRecord != "" || s.UnitsUsed != 3 {
		t.Errorf("dry run: record %q, used %d", s.UseRecord, s.UnitsUsed)
	}
	if u2, _ := bundle.ReadUses(set, nil); len(u2.Records) != 1 {
		t.Errorf("dry run wrote a use record: %q", u2.Records)
	}
	// The next job read a again and c for the first time: only c's use
	// is recorded; a job that read only a records nothing (U51).
	s = runPlan(t, set, dest, 2, 1, func(*Plan) {})
	if u3, _ := bundle.ReadUses(set, nil); s.UseRecord == "" || s.UsesRecorded != 2 || len(u3.Records) != 2 || len(u3.Units) != 3 {
		t.Errorf("again: record %q, already recorded %d, records %q, units %v", s.UseRecord, s.UsesRecorded, u3.Records, u3.Units)
	}
	read(t, dest+".node1/numba/a-1.py312.1.nbc")
	if s = runPlan(t, set, dest, 2, 1, func(*Plan) {}); s.UseRecord != "" || s.UsesRecorded != 3 {
		t.Errorf("a job that read recorded units: record %q, already recorded %d", s.UseRecord, s.UsesRecorded)
	}
	if u4, _ := bundle.ReadUses(set, nil); len(u4.Records) != 2 {
		t.Errorf("records %q, want no third", u4.Records)
	}
}

func atime(t *testing.T, p string) time.Time {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return time.Unix(st.Atim.Unix())
}

// With MaxSize, a harvest whose set passes the limit merges it without
// its least recently used units, whole, down to 90 %; a dry run says the
// same and writes nothing.
func TestHarvestMaxSizePrunes(t *testing.T) {
	dir := t.TempDir()
	skipNoatime(t, dir)
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 1, unitFiles) // 130 bytes
	// b was used two hours ago, c an hour ago (earlier jobs); the base was
	// written a day ago, so the Triton unit, never seen used, is older.
	day := time.Now().Add(-24 * time.Hour)
	os.Chtimes(set, day, day)
	if _, err := bundle.WriteUseRecord(context.Background(), set, &bundle.UseRecord{Units: map[string]bundle.Use{
		"numba/b-1.py312.nb*": {Time: time.Now().Add(-2 * time.Hour)}, "numba/c-1.py312.nb*": {Time: time.Now().Add(-time.Hour)}}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	d := dest + ".node0"
	read(t, d+"/numba/a-1.py312.nbi")
	write(t, d, "numba/e-1.py312.nbi", strings.Repeat("e", 30)) // compiled now: 160 bytes
	listing := func() []string {
		var out []string
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !strings.HasPrefix(p, dest) {
				out = append(out, fmt.Sprint(p, fi.Size(), fi.ModTime()))
			}
			return nil
		})
		return out
	}
	before := listing()
	dry := runPlan(t, set, dest, 1, 1, func(p *Plan) { p.MaxSize, p.DryRun = 90, true })
	if got := listing(); !slices.Equal(got, before) {
		t.Errorf("dry run changed the set:\n%q\n%q", before, got)
	}
	// 160 > 90: down to 81. The Triton unit (a day), then b (2 h), then c
	// (1 h); a (read now) and e (compiled now) stay.
	want := []string{tri, "numba/b-1.py312.nb*", "numba/c-1.py312.nb*"}
	if dry.Prune == nil || !slices.Equal(unitNames(dry.Prune), want) || dry.Prune.After != 60 {
		t.Fatalf("dry run's prune: %+v, want %q dropped", dry.Prune, want)
	}
	if !dry.DryRun || dry.Prune.DroppedBytes != 100 || dry.Prune.Dropped[0].Name != tri {
		t.Errorf("dry run: %+v, want 3 cache units (100 B) that would go, %s first", dry.Prune, tri)
	}

	s := runPlan(t, set, dest, 1, 1, func(p *Plan) { p.MaxSize = 90 })
	if s.Layer == "" || s.Prune == nil || !slices.Equal(unitNames(s.Prune), want) || s.Folded != 1 || s.SetBytes != 60 {
		t.Fatalf("harvest: layer %q, prune %+v, folded %d, set %d bytes", s.Layer, s.Prune, s.Folded, s.SetBytes)
	}
	got := map[string]bool{}
	for n := range layerFiles(t, set) {
		got[n] = true
	}
	if len(got) != 3 || !got["numba/a-1.py312.nbi"] || !got["numba/a-1.py312.1.nbc"] || !got["numba/e-1.py312.nbi"] {
		t.Errorf("pruned base holds %v, want a (read in this job, both files) and e (compiled)", got)
	}
	if p := s.Prune; p.DroppedBytes != 100 || p.Before != 160 || p.After != 60 {
		t.Errorf("prune %+v, want 3 cache units (100 B) dropped to bring the set from 160 B to 60 B", p)
	}
}

func unitNames(p *bundle.Prune) []string {
	var out []string
	for _, u := range p.Dropped {
		out = append(out, u.Name)
	}
	return out
}

// On a noatime mount (simulated: the test's statfs) a node cannot tell
// what the job read: the report says so, every unit of the set counts as
// used now (recorded Unknown), and the harvest does not prune a set over
// the limit.
func TestHarvestNoatimeNoPrune(t *testing.T) {
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 2, unitFiles)
	statfs = func(p string, st *unix.Statfs_t) error {
		err := unix.Statfs(p, st)
		if strings.HasSuffix(p, ".node1") {
			st.Flags |= unix.ST_NOATIME
		}
		return err
	}
	defer func() { statfs = unix.Statfs }()
	write(t, dest+".node0", "numba/e-1.py312.nbi", strings.Repeat("e", 30))
	s := runPlan(t, set, dest, 2, 1, func(p *Plan) { p.MaxSize = 100 })
	if s.Layer == "" || s.Prune != nil || s.Folded != 0 || !slices.Equal(s.UsageUnknown, []string{"kbn1"}) || s.Nodes[1].UsageUnknown == "" {
		t.Fatalf("summary: layer %q, prune %+v, unknown %q, nodes %+v", s.Layer, s.Prune, s.UsageUnknown, s.Nodes)
	}
	if !strings.Contains(s.PruneNote, "not pruned: what the job read is unknown on kbn1 (DEST mounted noatime)") || s.SetBytes != 160 {
		t.Errorf("note %q, set %d bytes", s.PruneNote, s.SetBytes)
	}
	if s.MaxSize != 100 || !strings.Contains(s.Nodes[1].UsageUnknown, "DEST is mounted noatime") {
		t.Errorf("max size %d, node 1's unknown use %q", s.MaxSize, s.Nodes[1].UsageUnknown)
	}
	u, err := bundle.ReadUses(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Units) != 4 || !u.Units["numba/b-1.py312.nb*"].Unknown {
		t.Errorf("recorded %+v, want the set's 4 units as used, unknown", u.Units)
	}
	if _, err := os.Stat(bundle.LayerDir(set)); err != nil {
		t.Fatal(err)
	}
	// The base is the one installed: nothing was dropped.
	if len(layerFiles(t, set)) != len(unitFiles) {
		t.Error("the base was rewritten")
	}
}
