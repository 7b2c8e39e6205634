package load_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/democache"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/preset"
)

// tritonBundle packs a Triton-layout cache under triton/, whose group
// files the triton preset rewrites at load.
func tritonBundle(t *testing.T) (src, file string) {
	t.Helper()
	src = filepath.Join(t.TempDir(), "cache")
	if _, err := democache.Generate(filepath.Join(src, "triton"), democache.Options{Kernels: 8, Scale: 0.2, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "b")
	os.Mkdir(dir, 0o700)
	file = filepath.Join(dir, "cache.kbundle")
	if _, err := bundle.Pack(context.Background(), src, file, &bundle.PackOptions{SegmentSize: bundle.MinSegmentSize}); err != nil {
		t.Fatal(err)
	}
	return src, file
}

func ctime(t *testing.T, p string) syscall.Timespec {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ctim
}

// TestRunAlreadyInstalled is issue 18 part 3: a load into DESTs that
// already hold the set, unchanged since their install, rewrites nothing
// (DEST's and the record's ctimes stay), streams no body when every node
// holds it, and extracts only on the nodes that do not; a DEST whose tree
// changed since is refused everywhere without --force, changing nothing.
func TestRunAlreadyInstalled(t *testing.T) {
	_, file := tritonBundle(t)
	triton, err := preset.Lookup("triton")
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(file)
	nodes := []int{0, 0, 1, 1, 2, 2}
	base := t.TempDir()
	dest := func(n int) string { return filepath.Join(base, fmt.Sprintf("n%d", n), "dest") }
	force := false
	plan := func(rank int) load.Plan {
		return load.Plan{Bundle: file, Dest: dest(nodes[rank]), Host: fmt.Sprintf("kbn%d", nodes[rank]), Window: 1,
			Presets: []*preset.Preset{triton}, Job: "j1", Force: force}
	}
	var received atomic.Int64 // bytes broadcast to rank 2 (node 1's leader)
	count := map[int]func([]byte){2: func(b []byte) { received.Add(int64(len(b))) }}
	mustLoad := func(what string, installed int) []*load.Summary {
		t.Helper()
		received.Store(0)
		sums, errs := run(t, nodes, plan, count)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%s: rank %d: %v", what, r, err)
			}
			if s := sums[r]; s.InstalledNodes != installed || !strings.HasPrefix(s.ContentDigest, "xxh3-128:") || s.ContentDigest != sums[0].ContentDigest {
				t.Fatalf("%s: rank %d: installed nodes %d content %q, want %d and rank 0's %q", what, r, s.InstalledNodes, s.ContentDigest, installed, sums[0].ContentDigest)
			}
		}
		return sums
	}

	first := mustLoad("first load", 0)
	if first[0].Entries == 0 || received.Load() < fi.Size() {
		t.Fatalf("first load: %d entries, %d bytes received on node 1 (bundle %d)", first[0].Entries, received.Load(), fi.Size())
	}
	rec, err := bundle.ReadInstallRecord(dest(1))
	if err != nil {
		t.Fatal(err)
	}
	relocated := 0
	for _, e := range rec.Entries {
		if e.Packed != "" {
			relocated++
		}
	}
	if rec.Job != "j1" || rec.Host != "kbn1" || rec.ContentDigest != first[0].ContentDigest || relocated != 8 || rec.Layers[0].Path != file {
		t.Fatalf("record: job %q host %q content %s, %d relocated entries (want 8), layer %q", rec.Job, rec.Host, rec.ContentDigest, relocated, rec.Layers[0].Path)
	}
	before := map[string]syscall.Timespec{}
	for n := range 3 {
		before[dest(n)] = ctime(t, dest(n))
		before[filepath.Join(dest(n), bundle.InstalledMarker)] = ctime(t, filepath.Join(dest(n), bundle.InstalledMarker))
	}
	unchanged := func(what string, except string) {
		t.Helper()
		for p, c := range before {
			if !strings.HasPrefix(p, except+"/") && p != except && ctime(t, p) != c {
				t.Errorf("%s: the ctime of %s changed", what, p)
			}
		}
	}

	// Again: every node holds it. No body crosses the network.
	again := mustLoad("second load", 3)
	for r, s := range again {
		if s.Leader != s.AlreadyInstalled || len(s.Env) == 0 {
			t.Errorf("second load: rank %d: leader %v already %v env %v", r, s.Leader, s.AlreadyInstalled, s.Env)
		}
	}
	if again[0].Entries != first[0].Entries || again[0].Bytes != first[0].Bytes {
		t.Errorf("second load: %d entries, %d bytes; first %d, %d", again[0].Entries, again[0].Bytes, first[0].Entries, first[0].Bytes)
	}
	if got := received.Load(); got > 16<<10 {
		t.Errorf("second load: %d bytes broadcast to node 1, want only the set check and the summary", got)
	}
	unchanged("second load", "-")

	// Node 1 lost its DEST: it alone extracts.
	if _, err := bundle.RemoveInstalled(dest(1)); err != nil {
		t.Fatal(err)
	}
	part := mustLoad("node 1 missing", 2)
	if part[2].AlreadyInstalled || !part[4].AlreadyInstalled || !part[0].AlreadyInstalled {
		t.Errorf("node 1 missing: already installed on ranks 0, 2, 4: %v %v %v", part[0].AlreadyInstalled, part[2].AlreadyInstalled, part[4].AlreadyInstalled)
	}
	if _, err := bundle.ReadInstallRecord(dest(1)); err != nil {
		t.Errorf("node 1 missing: %v", err)
	}
	unchanged("node 1 missing", dest(1))
	before[dest(1)] = ctime(t, dest(1))
	before[filepath.Join(dest(1), bundle.InstalledMarker)] = ctime(t, filepath.Join(dest(1), bundle.InstalledMarker))

	// The job compiled more on node 2: refused everywhere, nothing touched.
	added := filepath.Join(dest(2), "triton", "new.cubin")
	if err := os.WriteFile(added, []byte("compiled by the job"), 0o644); err != nil {
		t.Fatal(err)
	}
	before[dest(2)] = ctime(t, dest(2))
	_, errs := run(t, nodes, plan, nil)
	for r, err := range errs {
		if err == nil || err.Error() != errs[0].Error() {
			t.Fatalf("changed tree: rank %d: %v, want rank 0's error %v", r, err, errs[0])
		}
	}
	if !errors.Is(errs[0], bundle.ErrChanged) || !errors.Is(errs[0], bundle.ErrExist) {
		t.Errorf("changed tree: %v does not match ErrChanged and ErrExist", errs[0])
	}
	for _, want := range []string{"kbn2 (ranks 4-5): ", "1 new, 0 changed, 0 missing", "the job compiled more"} {
		if !strings.Contains(errs[0].Error(), want) {
			t.Errorf("changed tree: %q does not say %q", errs[0], want)
		}
	}
	unchanged("changed tree", "-")
	if _, err := os.Stat(added); err != nil {
		t.Errorf("changed tree: %v", err)
	}
	nothingUnder(t, filepath.Join(base, "n2"), "dest")

	// --force replaces it there; the others still hold the set.
	force = true
	mustLoad("changed tree, --force", 2)
	if _, err := os.Stat(added); err == nil {
		t.Errorf("--force kept %s", added)
	}
	unchanged("--force", dest(2))
	if rec, err := bundle.ReadInstallRecord(dest(2)); err != nil {
		t.Error(err)
	} else if c, err := bundle.CompareTree(dest(2), rec); err != nil || !c.Same() {
		t.Errorf("--force: node 2's tree against its record: %v %v", c, err)
	}
}
