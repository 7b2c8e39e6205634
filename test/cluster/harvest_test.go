package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// numbaRank is one rank's line of test/jit/testdata/numba_kernels.py.
type numbaRank struct {
	Rank      int `json:"rank"`
	Overloads int `json:"overloads"`
	Hits      int `json:"hits"`
	Misses    int `json:"misses"`
}

// numbaWorkload copies the Numba workload to the shared file system: its
// path and mtime stay the same from job to job, as Numba's index needs.
func numbaWorkload(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command(debianPython, "-c", "import numba").CombinedOutput(); err != nil {
		msg := debianPython + " cannot import numba (apt-get install python3-numba): " + strings.TrimSpace(string(out))
		if testutil.Required("JIT") {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir, err := os.MkdirTemp(tmpRoot, "numba-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	for _, f := range []string{"_common.py", "numba_kernels.py"} {
		b, err := os.ReadFile(filepath.Join("..", "jit", "testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "numba_kernels.py")
}

// TestHarvestLoopNumba is issue 17's loop on 3 nodes x 2 ranks, with
// Numba, under Open MPI's mpirun and MPICH's Hydra: job 1 starts with no
// set (load --allow-missing), compiles cold and its harvest writes the
// set's base; job 2 hits every kernel on every rank and harvests nothing;
// job 3 uses new shapes for half the functions and its harvest adds one
// layer holding only those functions' cache units; job 4 loads base and
// layer, hits everything and harvests nothing; after kbundle merge, job 5
// loads the merged set and hits everything too.
func TestHarvestLoopNumba(t *testing.T) {
	c := needCluster(t)
	for _, l := range mpiLaunches {
		t.Run(l.name, func(t *testing.T) {
			kb := c.kbundle(t, l.v)
			script := numbaWorkload(t)
			store, err := os.MkdirTemp(tmpRoot, "set-")
			if err != nil {
				t.Fatal(err)
			}
			os.Chmod(store, 0o700)
			set := filepath.Join(store, "cache.kbundle")
			parent := c.localDir(t)
			job := 0
			// one job: load, the application on every rank, harvest
			runJob := func(newShapes bool, loadArgs ...string) (ranks []numbaRank, harvest string) {
				t.Helper()
				job++
				dest := filepath.Join(parent, fmt.Sprintf("job%d", job))
				r := c.job(t, l, nil, append([]string{kb, "load", "--bundle", set, "--to", dest}, loadArgs...)...)
				if r.code != 0 {
					t.Fatalf("job %d: load: %s", job, r)
				}
				app := []string{"env", "NUMBA_CACHE_DIR=" + dest + "/numba"}
				if newShapes {
					app = append(app, "KBUNDLE_TEST_NEW_SHAPES=1")
				}
				r = c.job(t, l, nil, append(app, debianPython, script)...)
				if r.code != 0 {
					t.Fatalf("job %d: application: %s", job, r)
				}
				for _, line := range strings.Split(r.stdout, "\n") {
					var nr numbaRank
					if json.Unmarshal([]byte(line), &nr) == nil && nr.Overloads > 0 {
						ranks = append(ranks, nr)
					}
				}
				if len(ranks) != np {
					t.Fatalf("job %d: %d ranks reported, want %d\n%s", job, len(ranks), np, r)
				}
				r = c.job(t, l, nil, kb, "harvest", "--bundle", set, "--to", dest)
				if r.code != 0 {
					t.Fatalf("job %d: harvest: %s", job, r)
				}
				return ranks, r.stderr
			}
			allHits := func(ranks []numbaRank, overloads int) {
				t.Helper()
				for _, r := range ranks {
					if r.Hits != overloads || r.Misses != 0 {
						t.Errorf("job %d rank %d: %d hits, %d misses of %d overloads; want all hits", job, r.Rank, r.Hits, r.Misses, overloads)
					}
				}
			}
			layers := func() []bundle.SetLayer {
				ls, err := bundle.ListLayers(set, 0)
				if err != nil {
					t.Fatal(err)
				}
				return ls
			}

			// Job 1: no set yet; every node compiles; the harvest writes the base.
			ranks, h := runJob(false, "--allow-missing")
			for node := 0; node < numNodes; node++ {
				m := 0
				for _, r := range ranksOf(ranks, node) {
					m += r.Misses
				}
				if m == 0 {
					t.Errorf("job 1: node %d compiled nothing: it was not cold", node)
				}
			}
			if _, err := os.Stat(set); err != nil || len(layers()) != 0 {
				t.Fatalf("job 1's harvest: base %v, layers %v\n%s", err, layers(), h)
			}
			base := ranks[0].Overloads // 36

			// Job 2: all hits on every rank of every node; no layer.
			ranks, h = runJob(false)
			allHits(ranks, base)
			if ls := layers(); len(ls) != 0 {
				t.Errorf("job 2 (all hits) wrote layers %v\n%s", ls, h)
			}

			// Job 3: new shapes for f00-f05: one layer, only their units.
			ranks, h = runJob(true)
			missed := 0
			for _, r := range ranks {
				missed += r.Misses
				if r.Hits < base || r.Misses > r.Overloads-base {
					t.Errorf("job 3 rank %d: %d hits, %d misses of %d overloads: the base's should hit", r.Rank, r.Hits, r.Misses, r.Overloads)
				}
			}
			ls := layers()
			if missed == 0 || len(ls) != 1 {
				t.Fatalf("job 3: %d misses, layers %v; want one layer\n%s", missed, ls, h)
			}
			rc, err := bundle.Open(ls[0].Path, nil)
			if err != nil {
				t.Fatal(err)
			}
			nfiles := 0
			for _, e := range rc.Entries() {
				if e.Dir {
					continue
				}
				nfiles++
				if !newShapeUnit.MatchString(e.Name) {
					t.Errorf("job 3's layer holds %s, not a file of f00-f05's cache units", e.Name)
				}
			}
			rc.Close()
			if nfiles == 0 {
				t.Errorf("job 3's layer holds no file")
			}
			overloads := ranks[0].Overloads // 42

			// Job 4: base and layer loaded as one: all hits, no new layer.
			ranks, h = runJob(true)
			allHits(ranks, overloads)
			if ls := layers(); len(ls) != 1 {
				t.Errorf("job 4 (all hits) left layers %v\n%s", ls, h)
			}

			// Merge; job 5 loads the merged set: all hits again.
			if r := run(t, nil, kb, "merge", set); r.code != 0 {
				t.Fatalf("merge: %s", r)
			}
			ranks, _ = runJob(true)
			allHits(ranks, overloads)
			c.noStrays(t, kb, 10e9)
		})
	}
}

// newShapeUnit matches the cache files of f00-f05, the functions job 3
// gives a new signature (numba_kernels.f03-42.py311.nbi, ….2.nbc).
var newShapeUnit = regexp.MustCompile(`/numba_kernels\.f0[0-5]-[0-9]+\.py[0-9]+\.([0-9]+\.nbc|nbi)$`)

// ranksOf is the lines of node k's ranks (placed by slot).
func ranksOf(ranks []numbaRank, k int) []numbaRank {
	var out []numbaRank
	for _, r := range ranks {
		if r.Rank/perNode == k {
			out = append(out, r)
		}
	}
	return out
}

// debianPython is the Python with Debian's Numba (scripts/dev/deps.sh).
const debianPython = "/usr/bin/python3"
