package bundle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanPrune(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2025, 1, d, 0, 0, 0, 0, time.UTC) }
	units := []Unit{
		{Name: "a", Bytes: 40, LastUse: day(5)},
		{Name: "b", Bytes: 30, LastUse: day(1)},
		{Name: "c", Bytes: 20, LastUse: day(3), newest: day(2)},
		{Name: "d", Bytes: 10, LastUse: day(3), newest: day(1)}, // ties c: its files are older
		{Name: "e", Bytes: 5, LastUse: day(9), Unknown: true},
	}
	for _, tc := range []struct {
		name  string
		limit int64
		drop  []string
		after int64
	}{
		{"within the limit", 200, nil, 105},
		{"at the limit", 105, nil, 105},
		{"just past: down to 90 %", 104, []string{"b"}, 75},                // target 94
		{"ties: older files first", 80, []string{"b", "d"}, 65},            // target 72
		{"whole units: below the target", 60, []string{"b", "d", "c"}, 45}, // target 54
		{"down to the most recent", 10, []string{"b", "d", "c", "a"}, 5},   // target 9
		{"everything", 1, []string{"b", "d", "c", "a", "e"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanPrune(units, tc.limit)
			var got []string
			for _, u := range p.Dropped {
				got = append(got, u.Name)
			}
			if !slices.Equal(got, tc.drop) || p.After != tc.after || p.Before != 105 || p.Unknown != 1 {
				t.Errorf("dropped %q, after %d (before %d, unknown %d); want %q, %d", got, p.After, p.Before, p.Unknown, tc.drop, tc.after)
			}
			if len(got) > 0 && (p.After > p.Target || p.Target != tc.limit-tc.limit/10 || p.DroppedBytes != p.Before-p.After) {
				t.Errorf("after %d, target %d, dropped %d bytes", p.After, p.Target, p.DroppedBytes)
			}
		})
	}
}

// numbaSet writes a base of Numba units u0..u{n-1} (an index and two data
// files each, 10+20+30 bytes), a Triton hash directory and an empty
// directory, and returns its path.
func numbaSet(t *testing.T, n int) (string, string) {
	t.Helper()
	h := strings.Repeat("T", 52)
	path := filepath.Join(t.TempDir(), "cache.kbundle")
	_, err := WriteLayer(context.Background(), path, nil, func(w *Writer) error {
		for _, d := range []string{"numba", "numba/m", "triton", "triton/" + h, "empty"} {
			if err := w.Mkdir(d, 0o755, time.Unix(1, 0)); err != nil {
				return err
			}
		}
		for i := range n {
			s := string(rune('0' + i))
			for name, size := range map[string]int{".nbi": 10, ".1.nbc": 20, ".2.nbc": 30} {
				if err := w.WriteFile("numba/m/u"+s+"-1.py312"+name, 0o644, time.Unix(int64(10+i), 0), []byte(strings.Repeat(s, size))); err != nil {
					return err
				}
			}
		}
		for _, f := range []string{"k.cubin", "__grp__k.json"} {
			if err := w.WriteFile("triton/"+h+"/"+f, 0o644, time.Unix(50, 0), []byte(strings.Repeat("t", 50))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return path, "triton/" + h + "/"
}

func useRecord(t *testing.T, path string, units map[string]Use) string {
	t.Helper()
	p, err := WriteUseRecord(context.Background(), path, &UseRecord{By: "harvest", Units: units})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func names(t *testing.T, path string) []string {
	t.Helper()
	r, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	for _, e := range r.Entries() {
		out = append(out, e.Name)
	}
	return out
}

// --max-size drops the least recently used units whole: a Numba index
// with its data files, a Triton hash directory with its directory; an
// empty directory stays; a unit never seen used counts as used when its
// bundle was written; the units' last uses survive the merge in its use
// record, which replaces the records it read.
func TestMergeMaxSizeWholeUnits(t *testing.T) {
	path, tri := numbaSet(t, 4) // 4 × 60 + 100 = 340 bytes
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(path, old, old) // packed two days ago: u2 and u3 were never seen used since
	now := time.Now()
	r1 := useRecord(t, path, map[string]Use{"numba/m/u0-1.py312.nb*": {Time: now.Add(-time.Hour)}, tri: {Time: now.Add(-2 * time.Hour)}})
	r2 := useRecord(t, path, map[string]Use{"numba/m/u1-1.py312.nb*": {Time: now.Add(-3 * time.Hour)}, "numba/m/u0-1.py312.nb*": {Time: now.Add(-5 * time.Hour)}})

	res, err := MergeSet(context.Background(), path, &MergeOptions{Unit: CacheUnit, MaxSize: 250})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Prune
	// 340 > 250: down to 225. u2 and u3 (written two days ago, u2's files
	// older) go first: 220. Units are never split.
	if p == nil || len(p.Dropped) != 2 || p.Dropped[0].Name != "numba/m/u2-1.py312.nb*" || p.Dropped[1].Name != "numba/m/u3-1.py312.nb*" || p.After != 220 || p.Before != 340 {
		t.Fatalf("prune: %+v", p)
	}
	if p.Dropped[0].Files != 3 || p.Dropped[0].Recorded {
		t.Errorf("dropped unit: %+v, want 3 files, its last use its bundle's", p.Dropped[0])
	}
	got := names(t, path)
	for _, n := range got {
		if strings.Contains(n, "/u2-") || strings.Contains(n, "/u3-") {
			t.Errorf("%s left in the pruned base: a unit goes whole", n)
		}
	}
	for _, n := range []string{"empty", "numba/m", "numba/m/u0-1.py312.nbi", "numba/m/u1-1.py312.2.nbc", strings.TrimSuffix(tri, "/"), tri + "k.cubin"} {
		if !slices.Contains(got, n) {
			t.Errorf("%s missing from the pruned base (holds %q)", n, got)
		}
	}
	for _, f := range []string{r1, r2} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s stays: the merge's use record replaces it", f)
		}
	}
	u, err := ReadUses(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Records) != 1 || u.Records[0] != res.UseRecord || len(u.Units) != 3 ||
		!u.Units["numba/m/u0-1.py312.nb*"].Time.Equal(now.Add(-time.Hour)) || !u.Units[tri].Time.Equal(now.Add(-2*time.Hour)) {
		t.Errorf("after the merge: %+v", u)
	}

	// Again, a smaller bound: the oldest recorded use goes (u1, 3 h ago),
	// then the Triton directory (2 h): 60 left, under 90 % of 100.
	res, err = MergeSet(context.Background(), path, &MergeOptions{Unit: CacheUnit, MaxSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Dropped; len(d) != 2 || d[0] != "numba/m/u1-1.py312.nb*" || d[1] != tri || res.Prune.After != 60 {
		t.Errorf("second prune: dropped %q, after %d", d, res.Prune.After)
	}
	if got := names(t, path); slices.Contains(got, strings.TrimSuffix(tri, "/")) || !slices.Contains(got, "triton") || !slices.Contains(got, "empty") {
		t.Errorf("after the second prune: %q (the hash directory goes with its files)", got)
	}
}

// Dropping a base's units keeps its set_folded: readers must still skip
// the layers it folded.
func TestMergePruneKeepsFold(t *testing.T) {
	path, _ := numbaSet(t, 2)
	writeLayer(t, path, map[string]string{"numba/m/u9-1.py312.nbi": "nine"})
	if _, err := MergeSet(context.Background(), path, &MergeOptions{Unit: CacheUnit}); err != nil {
		t.Fatal(err)
	}
	res, err := MergeSet(context.Background(), path, &MergeOptions{Unit: CacheUnit, Drop: func(u string) bool { return strings.Contains(u, "u9") }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Folded != 0 || len(res.Dropped) != 1 || !res.Base {
		t.Fatalf("merge with Drop: %+v", res)
	}
	r, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Meta()[MetaSetFolded] != "1" {
		t.Errorf("set_folded %q, want 1", r.Meta()[MetaSetFolded])
	}
	s, err := OpenSet(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.HasDeltas() || slices.ContainsFunc(s.Merged(CacheUnit), func(e SetEntry) bool { return strings.Contains(e.Name, "u9") }) {
		t.Error("the folded layer is read again")
	}
}

// A dry run says what would go and writes nothing: not the base, not a
// use record, not a temporary; removes nothing either.
func TestMergeDryRunWritesNothing(t *testing.T) {
	path, _ := numbaSet(t, 3)
	writeLayer(t, path, map[string]string{"numba/m/u0-1.py312.nbi": "newer"})
	useRecord(t, path, map[string]Use{"numba/m/u1-1.py312.nb*": {Time: time.Now()}})
	before := snapshot(t, filepath.Dir(path))
	res, err := MergeSet(context.Background(), path, &MergeOptions{Unit: CacheUnit, MaxSize: 100, DryRun: true, Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || res.Folded != 1 || res.Prune == nil || len(res.Prune.Dropped) == 0 || res.UseRecord != "" {
		t.Errorf("dry run: %+v", res)
	}
	if after := snapshot(t, filepath.Dir(path)); !slices.Equal(before, after) {
		t.Errorf("dry run changed the directory:\n%q\n%q", before, after)
	}
}

// snapshot lists every file under dir with its size and mtime.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			out = append(out, p+" "+fi.ModTime().String()+" "+string(rune(fi.Size())))
		}
		return nil
	})
	return out
}

// A unit's last use: the latest record; for a unit of a delta layer, at
// least when the layer was written (a record older than that is of the
// unit's earlier version); without a record, its bundle's mtime.
func TestUnitsLastUse(t *testing.T) {
	path, _ := numbaSet(t, 3)
	base := time.Now().Add(-72 * time.Hour)
	os.Chtimes(path, base, base)
	lp := writeLayer(t, path, map[string]string{"numba/m/u1-1.py312.nbi": "i", "numba/m/u7-1.py312.nbi": "j"})
	layer := time.Now().Add(-time.Hour)
	os.Chtimes(lp.Path, layer, layer)
	rec := time.Now().Add(-2 * time.Hour)
	useRecord(t, path, map[string]Use{"numba/m/u0-1.py312.nb*": {Time: rec, Unknown: true}, "numba/m/u1-1.py312.nb*": {Time: rec},
		"numba/m/u7-1.py312.nb*": {Time: time.Now().Add(-time.Minute)}})
	s, err := OpenSet(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	u, err := ReadUses(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Unit{}
	for _, x := range s.Units(CacheUnit, u.Units) {
		got[strings.TrimSuffix(strings.TrimPrefix(x.Name, "numba/m/"), "-1.py312.nb*")] = x
	}
	for n, want := range map[string]struct {
		t        time.Time
		recorded bool
	}{"u0": {rec, true}, "u1": {layer, false}, "u2": {base, false}, "u7": {time.Now().Add(-time.Minute), true}} {
		if g := got[n]; g.LastUse.Sub(want.t).Abs() > time.Second || g.Recorded != want.recorded {
			t.Errorf("%s: last use %v (recorded %v), want %v (%v)", n, g.LastUse, g.Recorded, want.t, want.recorded)
		}
	}
	if !got["u0"].Unknown || got["u1"].Bytes != 1 || got["u1"].Files != 1 {
		t.Errorf("u0 %+v, u1 %+v", got["u0"], got["u1"])
	}

	// A merge keeps every unit's last use: its new base is written now.
	if _, err := MergeSet(context.Background(), path, &MergeOptions{Unit: CacheUnit}); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenSet(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	u2, err := ReadUses(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range s2.Units(CacheUnit, u2.Units) {
		if g := got[strings.TrimSuffix(strings.TrimPrefix(x.Name, "numba/m/"), "-1.py312.nb*")]; !x.LastUse.Equal(g.LastUse) || x.Recorded != g.Recorded || x.Unknown != g.Unknown {
			t.Errorf("after the merge, %s: %+v, was %+v", x.Name, x, g)
		}
	}
}

// Use records combine (latest wins, known over unknown at the same
// time), fold past useFoldAt, and a damaged one is skipped and named.
func TestUseRecords(t *testing.T) {
	path, _ := numbaSet(t, 1)
	t0 := time.Date(2025, 3, 1, 0, 0, 0, 5, time.UTC)
	useRecord(t, path, map[string]Use{"a": {Time: t0}, "b": {Time: t0, Unknown: true}})
	useRecord(t, path, map[string]Use{"a": {Time: t0.Add(-time.Hour)}, "b": {Time: t0}})
	if _, err := WriteUseRecord(context.Background(), path, &UseRecord{}); err != nil {
		t.Fatal(err)
	}
	u, err := ReadUses(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Records) != 2 || !u.Units["a"].Time.Equal(t0) || u.Units["b"].Unknown {
		t.Fatalf("combined: %+v (an empty record is not written)", u)
	}
	for i := range useFoldAt {
		useRecord(t, path, map[string]Use{"c": {Time: t0.Add(time.Duration(i) * time.Second)}})
	}
	u, err = ReadUses(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Records) > 2 || !u.Units["c"].Time.Equal(t0.Add((useFoldAt-1)*time.Second)) || !u.Units["a"].Time.Equal(t0) {
		t.Fatalf("after %d records: %d left, %+v", useFoldAt+2, len(u.Records), u.Units)
	}
	for _, bad := range []string{`{"kbundle_use_record":1,"units":[{"unit":"a","last_use":"yesterday"}]}`,
		`{"kbundle_use_record":1,"units":[{"unit":"b","last_use":"2025-01-01T00:00:00Z"},{"unit":"a","last_use":"2025-01-01T00:00:00Z"}]}`,
		`{"kbundle_use_record":1,"units":[{"unit":"../x","last_use":"2025-01-01T00:00:00Z"}]}`,
		`{"kbundle_use_record":2,"units":[]}`, `{"units":[]}`} {
		f := filepath.Join(LayerDir(path), "use-00000000000000ff.json")
		os.WriteFile(f, []byte(bad), 0o644)
		// X1 of the 2026-12-01b review: a damaged record is skipped and
		// named, never stopping a merge or a prune.
		u, err := ReadUses(path, nil)
		if err != nil || len(u.Skipped) != 1 || !strings.Contains(u.Skipped[0], f) || !u.Units["a"].Time.Equal(t0) {
			t.Errorf("%s: %+v, %v; want it skipped and named, the others read", bad, u, err)
		}
		res, err := MergeSet(context.Background(), path, &MergeOptions{Unit: CacheUnit, MaxSize: 1, DryRun: true})
		if err != nil || len(res.UsesSkipped) != 1 || !strings.Contains(res.UsesSkipped[0], f) {
			t.Errorf("merge --max-size with a damaged record: %+v, %v; want it skipped and named", res, err)
		}
	}
}
