package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/mpi"
)

// harvestAll runs one harvest request on every rank of a fake world of
// the given nodes; req(rank) gives each rank's request.
func harvestAll(t *testing.T, nodes []int, req func(rank int) loadcmd.HarvestRequest) []loadcmd.HarvestOutcome {
	t.Helper()
	world := broadcasttest.World(nodes...)
	return broadcasttest.OnEveryRank(world, func(c *broadcasttest.Comm) loadcmd.HarvestOutcome {
		opts, local := loadcmd.ResolveHarvest(req(c.Rank()), loadcmd.Python, c.Rank())
		return runHarvest(context.Background(), c, opts, local)
	})
}

// sameHarvest fails unless every rank's outcome is rank 0's, field for
// field (a harvest's outcome has nothing of a rank's own).
func sameHarvest(t *testing.T, rs []loadcmd.HarvestOutcome) {
	t.Helper()
	for i := range rs {
		if !reflect.DeepEqual(rs[i], rs[0]) {
			t.Errorf("rank %d's outcome differs from rank 0's:\n%+v\n%+v", i, rs[i], rs[0])
		}
	}
}

// TestHarvest: load on two fake nodes, one node compiles a file, harvest
// writes one layer with it (the same outcome on every rank, the report
// in Go's words); a second harvest writes none; a failure (the set's
// directory missing) is the same on every rank; a DEST load did not
// install is reported, not an error; no set configured is a usage error.
func TestHarvest(t *testing.T) {
	_, file := testBundle(t)
	dest := filepath.Join(t.TempDir(), "d")
	env := map[string]string{"KBUNDLE_TEST_RANKS_PER_NODE": "1"}
	nodes := []int{0, 0}
	rs := runAll(t, nodes, func(int) loadcmd.Request { return loadcmd.Request{Bundle: file, Dest: dest, Environ: env} })
	if !rs[0].OK || rs[0].Nodes != 2 {
		t.Fatalf("load: %+v", rs[0])
	}
	if err := os.WriteFile(filepath.Join(dest+".node1", "numba", "new.nbi"), []byte("compiled on node 1"), 0o600); err != nil {
		t.Fatal(err)
	}
	req := func(int) loadcmd.HarvestRequest {
		return loadcmd.HarvestRequest{Bundle: file, Dest: dest, Environ: env}
	}

	dry := harvestAll(t, nodes, func(int) loadcmd.HarvestRequest {
		return loadcmd.HarvestRequest{Bundle: file, Dest: dest, Environ: env, DryRun: true}
	})
	sameHarvest(t, dry)
	if d := dry[0]; !d.OK || !d.DryRun || d.Files != 1 || d.Layer != "" || len(d.Report) < 3 ||
		d.Report[len(d.Report)-1] != "dry run: would write 1 file (1 cache unit) to "+file {
		t.Fatalf("dry run: %+v", d)
	}
	if m, _ := filepath.Glob(file + ".d/*"); len(m) != 0 {
		t.Fatalf("a dry run wrote %v", m)
	}

	hs := harvestAll(t, nodes, req)
	sameHarvest(t, hs)
	h := hs[0]
	layers, _ := filepath.Glob(file + ".d/*.kbundle")
	if !h.OK || h.Files != 1 || h.Units != 1 || h.Bytes != int64(len("compiled on node 1")) || h.Base || h.Set != file ||
		len(layers) != 1 || h.Layer != layers[0] || !strings.HasPrefix(h.Digest, "xxh3-128:") || !strings.HasPrefix(h.Content, "xxh3-128:") {
		t.Fatalf("harvest: %+v (layers %v)", h, layers)
	}
	if len(h.Nodes) != 2 || h.Nodes[0].Entries != 0 || h.Nodes[1].Entries != 1 || h.Nodes[1].FirstRank != 1 || h.Nodes[1].Chosen != 1 {
		t.Errorf("nodes: %+v", h.Nodes)
	}
	host, _ := os.Hostname()
	want := []string{
		host + " (rank 0): compiled 0 entries (0 B) the bundle lacked",
		host + " (rank 1): compiled 1 entry (18 B) the bundle lacked",
		"wrote a new layer, " + layers[0] + ": 1 file (1 cache unit, 18 B)",
	}
	// After the presets' lines (harvest.UseReport): the nodes', then
	// what was written.
	if n := len(h.Report); n < len(want) || !reflect.DeepEqual(h.Report[n-len(want):], want) || !strings.Contains(h.Report[0], ": numba: ") {
		t.Errorf("report %q, want the presets' lines, then %q", h.Report, want)
	}
	if !reflect.DeepEqual(h.Report, loadcmd.HarvestReport(loadcmd.Python, &h.Summary)) {
		t.Errorf("report %q is not HarvestReport's", h.Report)
	}

	again := harvestAll(t, nodes, req)
	sameHarvest(t, again)
	if a := again[0]; !a.OK || a.Layer != "" || a.Files != 0 || a.Report[len(a.Report)-1] != "nothing new: no layer written to "+file {
		t.Fatalf("second harvest: %+v", a)
	}
	if m, _ := filepath.Glob(file + ".d/*.kbundle"); len(m) != 1 {
		t.Errorf("a second harvest wrote a layer: %v", m)
	}

	// Another set than DEST was loaded from (U35): every rank is refused
	// alike, in Python's words, and nothing is written.
	missing := filepath.Join(t.TempDir(), "nodir", "set.kbundle")
	fs := harvestAll(t, nodes, func(int) loadcmd.HarvestRequest {
		return loadcmd.HarvestRequest{Bundle: missing, Dest: dest, Environ: env}
	})
	sameHarvest(t, fs)
	if f := fs[0]; f.OK || f.Kind != loadcmd.Usage || !strings.Contains(f.Reason, "was loaded from "+file+", not from "+missing) ||
		!strings.HasSuffix(f.Reason, "pass bundle="+file) {
		t.Errorf("another set: %+v", f)
	}
	if _, err := os.Lstat(filepath.Dir(missing)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused harvest made %s", filepath.Dir(missing))
	}

	// A DEST that load did not install: named in the report, not an error.
	plain := t.TempDir()
	ps := harvestAll(t, []int{0, 0}, func(int) loadcmd.HarvestRequest { return loadcmd.HarvestRequest{Bundle: file, Dest: plain} })
	sameHarvest(t, ps)
	if p := ps[0]; !p.OK || len(p.Nodes) != 1 || !p.Nodes[0].NoRecord || !strings.Contains(p.Report[0], "not harvested: ") {
		t.Errorf("no install record: %+v", p)
	}

	// Only rank 0's set is used; none given, it is the one its DEST was
	// loaded from (U36).
	us := harvestAll(t, nodes, func(rank int) loadcmd.HarvestRequest {
		if rank == 0 {
			return loadcmd.HarvestRequest{Dest: dest, Environ: env}
		}
		return loadcmd.HarvestRequest{Bundle: "/elsewhere.kbundle", Dest: dest, Environ: env}
	})
	sameHarvest(t, us)
	if u := us[0]; !u.OK || u.Set != file {
		t.Errorf("no set: %+v, want %s", u, file)
	}
	us = harvestAll(t, nodes, func(rank int) loadcmd.HarvestRequest {
		r := loadcmd.HarvestRequest{Bundle: file, Dest: dest}
		if rank == 1 {
			r.Timeout = ptr(-1.0)
		}
		return r
	})
	sameHarvest(t, us)
	if u := us[0]; u.OK || u.Kind != loadcmd.Usage || !strings.Contains(u.Reason, "rank 1: timeout=-1: want seconds") {
		t.Errorf("bad timeout on rank 1: %+v", u)
	}
}

// TestHarvestDefaults: the set from KBUNDLE_CACHE_DIR, DEST as load's
// default (TMPDIR, the user, the job), as `kbundle harvest` finds them.
func TestHarvestDefaults(t *testing.T) {
	_, file := testBundle(t)
	env := map[string]string{"TMPDIR": t.TempDir(), "SLURM_JOB_ID": "77", "KBUNDLE_CACHE_DIR": filepath.Dir(file)}
	rs := runAll(t, []int{0}, func(int) loadcmd.Request { return loadcmd.Request{Environ: env} })
	if !rs[0].OK {
		t.Fatalf("load: %+v", rs[0])
	}
	if err := os.WriteFile(filepath.Join(rs[0].Dest, "new.bin"), []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	hs := harvestAll(t, []int{0}, func(int) loadcmd.HarvestRequest { return loadcmd.HarvestRequest{Environ: env} })
	if h := hs[0]; !h.OK || h.Files != 1 || h.Set != file || h.Layer == "" {
		t.Fatalf("%+v", h)
	}
}

// TestHarvestFortranErrors: the C entry's answers before any collective.
func TestHarvestFortranErrors(t *testing.T) {
	var r loadcmd.HarvestOutcome
	if err := json.Unmarshal(harvestFortran(context.Background(), 0, []byte("{")), &r); err != nil || r.OK || r.Kind != loadcmd.Usage {
		t.Errorf("bad JSON: %+v %v", r, err)
	}
	if mpi.Initialized() {
		t.Skip("MPI is initialised")
	}
	r = loadcmd.HarvestOutcome{}
	if err := json.Unmarshal(harvestFortran(context.Background(), 0, []byte("{}")), &r); err != nil || r.OK || r.Kind != loadcmd.Comm {
		t.Errorf("no MPI: %+v %v", r, err)
	}
}
