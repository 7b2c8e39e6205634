package loadcmd

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/harvest"
	"github.com/kbundle/kbundle/mpi"
)

// TestResolveHarvest: a harvest's settings are load's, read by the same
// code (the value given wins, then its variable, then the default), and
// KBUNDLE_PRESET or KBUNDLE_JOBS, which a harvest has no use for, are not
// read; only rank 0 needs a set.
func TestResolveHarvest(t *testing.T) {
	for _, c := range []struct {
		name    string
		req     HarvestRequest
		rank    int
		bundle  string
		dest    string // relative to the job's default: "" is load.Dest's
		timeout time.Duration
		err     string // CLI's; "" no error
		py      string // Python's, when it differs
	}{
		{name: "given", req: HarvestRequest{Bundle: "b", Dest: "/d", Timeout: ptr(5.0), DryRun: true,
			Environ: map[string]string{"KBUNDLE_BUNDLE": "eb", "KBUNDLE_LOCAL_DIR": "/l", "KBUNDLE_TIMEOUT": "30"}},
			bundle: "b", dest: "/d", timeout: 5 * time.Second},
		{name: "variables", req: HarvestRequest{Environ: map[string]string{"KBUNDLE_BUNDLE": "eb", "KBUNDLE_LOCAL_DIR": "/l",
			"KBUNDLE_TIMEOUT": "30s", "KBUNDLE_PRESET": "bogus", "KBUNDLE_JOBS": "many"}},
			bundle: "eb", dest: "/l", timeout: 30 * time.Second},
		{name: "the cache dir", req: HarvestRequest{Environ: map[string]string{"KBUNDLE_CACHE_DIR": "/c"}},
			bundle: "/c/" + broadcast.BundleName, timeout: DefaultTimeout},
		// No set: the one DEST was loaded from (U36), rank 0's, found by
		// the harvest.
		{name: "no set", req: HarvestRequest{}, timeout: DefaultTimeout},
		{name: "no set on rank 1", req: HarvestRequest{}, rank: 1, timeout: DefaultTimeout},
		{name: "a directory", req: HarvestRequest{Bundle: "/"}, err: "/ is a directory, not a bundle set: pass --dir / (/cache.kbundle), or the set's file",
			py: "/ is a directory, not a bundle set: pass bundle=/cache.kbundle"},
		{name: "timeout", req: HarvestRequest{Bundle: "b", Timeout: ptr(-1.0)}, err: "--timeout -1: want seconds", py: "timeout=-1: want seconds"},
		{name: "KBUNDLE_TIMEOUT", req: HarvestRequest{Bundle: "b", Environ: map[string]string{"KBUNDLE_TIMEOUT": "soon"}}, err: `KBUNDLE_TIMEOUT: timeout "soon"`},
		{name: "trust", req: HarvestRequest{Bundle: "b", Environ: map[string]string{"KBUNDLE_TRUSTED_GROUPS": "nosuchgrp-kbundle"}}, err: "KBUNDLE_TRUSTED_GROUPS"},
		{name: "ranks per node", req: HarvestRequest{Bundle: "b", Environ: map[string]string{"KBUNDLE_TEST_RANKS_PER_NODE": "0"}}, err: "KBUNDLE_TEST_RANKS_PER_NODE"},
		{name: "control character", req: HarvestRequest{Bundle: "b", Dest: "/a\nb"}, bundle: "b", dest: "/a\nb", timeout: DefaultTimeout, err: "control characters are not allowed", py: "-"},
	} {
		for _, f := range []Front{CLI, Python} {
			o, err := ResolveHarvest(c.req, f, c.rank)
			want := c.err
			if f == Python && c.py != "" {
				want = c.py
			}
			if f == Python && c.rank != 0 && strings.HasPrefix(want, "no bundle set") {
				want = "" // rank 0's set is the one used
			}
			if want == "-" {
				want = ""
			}
			if want != "" {
				if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrUsage) || KindOf(err) != Usage {
					t.Errorf("%s (%v): error %v, want %q (usage)", c.name, f, err, want)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s (%v): %v", c.name, f, err)
				continue
			}
			p, err := o.Plan("42", true)
			if err != nil {
				t.Fatal(err)
			}
			if c.dest == "" {
				c.dest = filepath.Join(filepath.Dir(p.Dest), "kbundle-"+UserName()+"-42")
			}
			if p.Bundle != c.bundle || p.Dest != c.dest || o.Timeout != c.timeout || p.DryRun != c.req.DryRun {
				t.Errorf("%s (%v): bundle %q dest %q timeout %v dry %v, want %q %q %v %v", c.name, f,
					p.Bundle, p.Dest, o.Timeout, p.DryRun, c.bundle, c.dest, c.timeout, c.req.DryRun)
			}
		}
	}
	o, _ := ResolveHarvest(HarvestRequest{Bundle: "b", Environ: map[string]string{"KBUNDLE_TEST_RANKS_PER_NODE": "2", "TMPDIR": "/t"}}, Python, 0)
	if p, _ := o.Plan("7", true); p.RanksPerNode != 2 || p.Dest != "/t/kbundle-"+UserName()+"-7" || p.Search != "/t/kbundle-"+UserName()+"-" || p.Job != "7" {
		t.Errorf("plan %+v", p)
	}
	if p, _ := o.Plan("7", false); p.RanksPerNode != 0 {
		t.Errorf("without MPI: %+v", p)
	}
}

// TestHarvestReport: the lines of `kbundle harvest` and harvest(): one a
// node, then what was written.
func TestHarvestReport(t *testing.T) {
	nodes := []harvest.NodeReport{{Host: "kbn1", FirstRank: 0, LastRank: 1, Entries: 2, Bytes: 2048, Elsewhere: 1}}
	for _, c := range []struct {
		sum  harvest.Summary
		last string
	}{
		{harvest.Summary{Set: "/s/set.kbundle"}, "nothing new: no layer written to /s/set.kbundle"},
		{harvest.Summary{Set: "/s/set.kbundle", DryRun: true, Files: 3, Units: 2}, "dry run: would write 3 files (2 cache units) to /s/set.kbundle"},
		{harvest.Summary{Set: "/s/set.kbundle", Layer: "/s/set.kbundle.d/000001-ab.kbundle", Files: 3, Units: 2, Bytes: 3 << 20},
			"wrote a new layer, /s/set.kbundle.d/000001-ab.kbundle: 3 files (2 cache units, 3.0 MiB)"},
		{harvest.Summary{Set: "/s/set.kbundle", Layer: "/s/set.kbundle", Base: true, Files: 1, Units: 1, Bytes: 1 << 19},
			"wrote the set's first bundle, /s/set.kbundle: 1 file (1 cache unit, 512.0 KiB)"},
		// More files than the nodes compiled: the unchanged files of their
		// units, said (U43).
		{harvest.Summary{Set: "/s/set.kbundle", Layer: "/s/set.kbundle.d/000001-ab.kbundle", Files: 3, Kept: 1, Units: 2, Bytes: 3 << 20},
			"wrote a new layer, /s/set.kbundle.d/000001-ab.kbundle: 3 files (2 cache units, 3.0 MiB; 1 unchanged, as each cache unit goes whole)"},
	} {
		c.sum.Nodes = nodes
		got := HarvestReport(CLI, &c.sum)
		want := []string{"kbn1 (ranks 0-1): compiled 2 entries (2.0 KiB) the bundle lacked; 1 also on other nodes", c.last}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q, want %q", got, want)
		}
		if o := Harvested(CLI, &c.sum); !o.OK || !reflect.DeepEqual(o.Report, want) || o.Warnings == nil {
			t.Errorf("Harvested: %+v", o)
		}
	}
}

// TestHarvestReportUntrusted (H4 of the 2026-12-01b review): a layer that
// a load would refuse as untrusted is said so, after what was written.
func TestHarvestReportUntrusted(t *testing.T) {
	sum := harvest.Summary{Set: "/s/set.kbundle", Layer: "/s/set.kbundle.d/000001-ab.kbundle", Files: 1, Units: 1, Bytes: 1,
		Untrusted: "/s/set.kbundle.d: untrusted: directory mode 0775 lets group g (gid 9) write it"}
	got := HarvestReport(CLI, &sum)
	if want := "warning: kbundle load will refuse this set (exit 3): " + sum.Untrusted; len(got) == 0 || got[len(got)-1] != want {
		t.Errorf("%q, want it to end with %q", got, want)
	}
}

// TestHarvestFailure: KindOf's classes, and hints naming harvest.
func TestHarvestFailure(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind Kind
		hint string
	}{
		{errors.New("harvest: cannot write a layer of /s: permission denied"), Failed, ""},
		{AtComm(errors.New("mpi: bcast")), Comm, ""},
		{usagef("timeout=-1: want seconds"), Usage, ""},
		{mpi.ErrNotInitialized, Comm, "before calling harvest"},
		{mpi.ErrThreadLevel, Comm, "mpi4py.rc.thread_level"},
	} {
		o := HarvestFailure(Python, c.err)
		if o.OK || o.Kind != c.kind || o.Reason != c.err.Error() || (c.hint == "") != (o.Hint == "") || !strings.Contains(o.Hint, c.hint) {
			t.Errorf("%v: %+v, want kind %s hint %q", c.err, o, c.kind, c.hint)
		}
	}
}

// TestHarvestReportMerged: a merged database is said after what was
// written, loudly where a copy was left out or records were lost.
func TestHarvestReportMerged(t *testing.T) {
	db := "miopen/cache/gfx942_304.ukdb"
	from := []string{"kbn0 (rank 0)", "kbn1 (rank 1)"}
	for _, c := range []struct {
		d    harvest.DBMerge
		dry  bool
		want []string
	}{
		{harvest.DBMerge{Name: db, From: from, Records: 4, Added: 2}, false,
			[]string{"merged 2 copies of " + db + ", record by record (kbn0 (rank 0), kbn1 (rank 1)): 4 records, 2 added to the lowest rank's"}},
		{harvest.DBMerge{Name: db, From: from, Records: 3, Added: 1, Conflicts: 1}, false,
			[]string{"merged 2 copies of " + db + ", record by record (kbn0 (rank 0), kbn1 (rank 1)): 3 records, 1 added to the lowest rank's, 1 record on a key a lower rank's copy holds with other values (the lower rank's kept)"}},
		{harvest.DBMerge{Name: db, From: from, Records: 2, LeftOut: []string{"kbn1 (rank 1): not a valid SQLite database (file is not a database)"}}, false,
			[]string{"merged 1 copy of " + db + ", record by record (kbn0 (rank 0), kbn1 (rank 1)): 2 records, 0 added to the lowest rank's",
				"warning: " + db + ": left out the copy of kbn1 (rank 1): not a valid SQLite database (file is not a database)"}},
		{harvest.DBMerge{Name: db, From: from, Fallback: "no Python to merge with (python3 not found)", FallbackFrom: "kbn0 (rank 0)"}, false,
			[]string{"warning: " + db + ": no Python to merge with (python3 not found); the layer holds the copy of kbn0 (rank 0) only, and the records only the other nodes added are lost (pass --python PATH, a Python with sqlite3, or set KBUNDLE_PYTHON)"}},
		{harvest.DBMerge{Name: db, From: from}, true,
			[]string{"would merge 2 copies of " + db + ", record by record: kbn0 (rank 0), kbn1 (rank 1)"}},
	} {
		s := harvest.Summary{Set: "/s/set.kbundle", Layer: "/s/set.kbundle.d/000001-ab.kbundle", Files: 1, Units: 1, Bytes: 1, DryRun: c.dry, Merged: []harvest.DBMerge{c.d}}
		got := HarvestReport(CLI, &s)
		if len(got) < len(c.want) || !reflect.DeepEqual(got[len(got)-len(c.want):], c.want) {
			t.Errorf("%q, want it to end with %q", got, c.want)
		}
		var warned []string
		for _, l := range c.want {
			if strings.HasPrefix(l, "warning: ") {
				warned = append(warned, l)
			}
		}
		if o := Harvested(CLI, &s); len(o.Warnings) != len(warned) || (len(warned) > 0 && !reflect.DeepEqual(o.Warnings, warned)) {
			t.Errorf("Harvested's warnings %q, want %q", o.Warnings, warned)
		}
	}
}
