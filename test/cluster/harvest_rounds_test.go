package cluster

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// roundsDefault is TestHarvestMergeRoundsPFS's number of rounds; the
// variable KBUNDLE_TEST_PFS_ROUNDS sets another.
const roundsDefault = 20

// roundsGrace is the merges' --grace: short, so that each round's merge
// removes the layers the previous round's merge folded.
const roundsGrace = time.Second

// roundsCaches are TestHarvestMergeRoundsPFS's mounts: sshfs without
// its cache and the kernel's attribute and name caches off, so that an
// open of the base sees the file it opened, as NFS's close-to-open
// guarantees (and Lustre and GPFS, coherent). With sshfs's default
// caches (KBUNDLE_TEST_PFS_CACHES=sshfs: writerCaches), a node that
// looked at the base shortly before another node's merge renamed a new
// base over it (20 s; still about 2 s with dcache_stat_timeout=1 and the
// kernel's 1 s) opens the new base with the old one's size: sshfs names
// files by path and revalidates nothing on open, and fstat answers from
// its cache. Its load, harvest or merge then refuses the set as damaged
// ("no end marker: the file is truncated", exit 3) until the attributes
// expire: a refusal, nothing loaded wrong and nothing lost.
func roundsCaches(int) []string {
	return []string{"-o", "dir_cache=no", "-o", "attr_timeout=0", "-o", "entry_timeout=0"}
}

// TestHarvestMergeRoundsPFS (issue 26): publishing and merging are
// linearizable on a real network file system. The set lives on sshfs
// (networkFSWith: each node its own client, mounted coherent: roundsCaches).
// Each round, three one-rank jobs (Open MPI's mpirun), one on each node,
// load the set into a DEST of that round, compile a file each (a name of
// their own, per job and round) and read a base file (so each harvest
// also writes a use record); then their three harvests and a merge
// (--grace 1s, from the round's node in turn) run at once: the harvests
// are held with their layers written (KBUNDLE_TEST_FAILPOINT) and let go
// together, the merge started at a varied offset around that moment;
// every third round one harvest is held with its number claimed instead
// while the other two publish and the merge folds them (skipping layers
// by number, not by the names the base folds, loses its file).
// After every round a fresh load of the set, on kbn3 (over sshfs) and on
// this machine (the server's own view), holds the base and every file
// every harvest so far reported written, and kbundle verify of the set
// passes; every layer ever written is either in the set's folder or was
// removed by a merge that said so, once. At the end one more merge past
// the grace, and the same checks.
func TestHarvestMergeRoundsPFS(t *testing.T) {
	c := needCluster(t)
	rounds := roundsDefault
	if v := os.Getenv("KBUNDLE_TEST_PFS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("KBUNDLE_TEST_PFS_ROUNDS=%q: want a number of rounds, 1 or more", v)
		}
		rounds = n
	}
	caches := roundsCaches
	if os.Getenv("KBUNDLE_TEST_PFS_CACHES") == "sshfs" {
		caches = writerCaches
	}
	server, mount := c.networkFSWith(t, caches)
	nompi := c.kbundle(t, testutil.NoMPI)
	l := mpiLaunches[0] // Open MPI
	kb := c.kbundle(t, l.v)
	src := makeTree(t, 4<<10)
	want := map[string]string{} // every file the set must hold → its content
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(src, p)
			want[rel] = string(b)
		}
		return nil
	})
	dir := filepath.Join(server, "rounds")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	serverSet := filepath.Join(dir, "cache.kbundle")
	if r := run(t, nil, nompi, "pack", "-q", "--dir", src, "-o", serverSet); r.code != 0 {
		t.Fatalf("pack: %s", r)
	}
	layerDir := bundle.LayerDir(serverSet)
	set := filepath.Join(mount, "rounds", "cache.kbundle") // as the nodes see it
	parent := c.localDir(t)
	checks, err := os.MkdirTemp(tmpRoot, "checks-")
	if err != nil {
		t.Fatal(err)
	}

	var (
		written  = map[string]string{} // layer (base name) → the file it was to hold
		removed  = map[string]int{}    // layer → the round whose merge removed it
		folds    int                   // merges that folded layers
		refusals []string              // merges that said the set changed
		took     []time.Duration
	)
	// offsets of the merge's start from the harvests' release, cycled.
	offsets := []time.Duration{0, -100 * time.Millisecond, 50 * time.Millisecond, -30 * time.Millisecond, 150 * time.Millisecond, 10 * time.Millisecond}

	// check loads the set on kbn3 and here and verifies it, after round
	// (its label); a missing file is the bug this test is for.
	check := func(label, tag string) {
		t.Helper()
		if os.Getenv("KBUNDLE_TEST_PFS_CACHES") == "sshfs" {
			time.Sleep(1100 * time.Millisecond) // kbn3's caches (1 s) hold nothing older than the round's end
		}
		dest := filepath.Join(parent, "check-"+tag)
		if r := run(t, nil, c.onArgv(c.nodes[2], nompi, "load", "-q", "--bundle", set, "--to", dest)...); r.code != 0 {
			t.Fatalf("%s: load on %s: %s", label, c.nodes[2], r)
		}
		got := c.filesOn(t, c.nodes[2], dest)
		os.RemoveAll(c.root(c.nodes[2], dest))
		here := filepath.Join(checks, tag)
		if r := run(t, nil, nompi, "load", "-q", "--bundle", serverSet, "--to", here); r.code != 0 {
			t.Fatalf("%s: load on the server: %s", label, r)
		}
		gotHere := filesIn(here)
		os.RemoveAll(here)
		for _, v := range []struct {
			where string
			got   map[string]string
		}{{c.nodes[2] + " (sshfs)", got}, {"the server", gotHere}} {
			var lost []string
			for f, b := range want {
				if v.got[f] != b {
					lost = append(lost, f)
				}
				delete(v.got, f)
			}
			slices.Sort(lost)
			if len(lost) > 0 {
				t.Errorf("%s: a load on %s lacks %d of the %d files the set must hold: %q\nset folder: %q", label, v.where, len(lost), len(want), lost, namesIn(layerDir))
			}
			if len(v.got) > 0 {
				t.Errorf("%s: a load on %s holds files no harvest wrote: %v", label, v.where, v.got)
			}
		}
		if r := run(t, nil, nompi, "verify", "-q", serverSet); r.code != 0 {
			t.Errorf("%s: verify: %s", label, r)
		}
		// Every layer written is in the folder, or was removed by a
		// merge that said so; nothing else is there.
		present := map[string]bool{}
		for _, n := range namesIn(layerDir) {
			if strings.HasSuffix(n, ".kbundle") {
				present[n] = true
				if _, ok := written[n]; !ok {
					t.Errorf("%s: %s: a layer no harvest reported", label, n)
				}
			}
		}
		for n := range written {
			_, rm := removed[n]
			if present[n] == rm {
				t.Errorf("%s: layer %s: in the folder %v, removed by a merge %v: want exactly one", label, n, present[n], rm)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	// merge runs kbundle merge on node and accounts for what it says.
	merge := func(round int, node string, r *result) string {
		t.Helper()
		if r.code != 0 {
			if strings.Contains(r.stdout+r.stderr, bundle.ErrSetChanged.Error()) {
				refusals = append(refusals, fmt.Sprintf("round %d (%s): %s", round, node, strings.TrimSpace(r.stderr)))
				return "said the set changed"
			}
			t.Fatalf("round %d: merge on %s: %s", round, node, r)
		}
		var out struct {
			Folded  int      `json:"folded"`
			Removed []string `json:"removed"`
		}
		if err := json.Unmarshal([]byte(lastJSON(r.stdout)), &out); err != nil {
			t.Fatalf("round %d: merge on %s: %v: %s", round, node, err, r)
		}
		if out.Folded > 0 {
			folds++
		}
		for _, p := range out.Removed {
			n := filepath.Base(p)
			if _, ok := written[n]; !ok {
				t.Errorf("round %d: merge on %s removed %s, which no harvest wrote", round, node, p)
			}
			if prev, ok := removed[n]; ok {
				t.Errorf("round %d: merge on %s removed %s, which round %d's merge removed", round, node, p, prev)
			}
			removed[n] = round
		}
		return fmt.Sprintf("folded %d, removed %d", out.Folded, len(out.Removed))
	}

	for round := 1; round <= rounds; round++ {
		begin := time.Now()
		label := fmt.Sprintf("round %d", round)
		// Three jobs load the set, one on each node, at once.
		var procs []*proc
		dests := make([]string, len(c.nodes))
		for i, n := range c.nodes {
			dests[i] = filepath.Join(parent, fmt.Sprintf("r%02d-%s", round, n))
			procs = append(procs, start(t, jobTimeout, ompiTmp(t), c.argvOn(l, []string{n}, kb, "load", "-q", "--bundle", set, "--to", dests[i])...))
		}
		for i, p := range procs {
			if r := p.wait(t); r.code != 0 {
				t.Fatalf("%s: load on %s: %s", label, c.nodes[i], r)
			}
		}
		// Each compiles a file of its own and reads a base file.
		files := make([]string, len(c.nodes))
		for i, n := range c.nodes {
			files[i] = fmt.Sprintf("jobs/r%02d-%s.bin", round, n)
			body := fmt.Sprintf("round %d, job on %s, %d", round, n, time.Now().UnixNano())
			p := c.root(n, filepath.Join(dests[i], files[i]))
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := os.ReadFile(c.root(n, filepath.Join(dests[i], "top.txt"))); err != nil {
				t.Fatal(err)
			}
		}
		// Three harvests held with their layers written, let go together;
		// the merge from the round's node around that moment. Every third
		// round one harvest is held with its number claimed instead (the
		// review's H2): the other two publish above it, the merge folds
		// them, and only then does it link its layer, numbered below the
		// new base's fold, which must leave it in view.
		gates, err := os.MkdirTemp(tmpRoot, "gates-")
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(gates, 0o755)
		held := -1
		if round%3 == 0 {
			held = (round / 3) % len(c.nodes)
		}
		procs = procs[:0]
		for i, n := range c.nodes {
			step := "written"
			if i == held {
				step = "claimed"
			}
			env := append(ompiTmp(t), "KBUNDLE_TEST_FAILPOINT="+step+":0:wait="+filepath.Join(gates, n))
			procs = append(procs, start(t, jobTimeout, env, c.argvOn(l, []string{n}, kb, "harvest", "--json", "--bundle", set, "--to", dests[i])...))
		}
		for _, n := range c.nodes {
			if !waitFor(60*time.Second, func() bool { return exists(filepath.Join(gates, n+".reached")) }) {
				for i, p := range procs {
					p.cancel()
					t.Logf("harvest on %s: %s", c.nodes[i], p.wait(t))
				}
				t.Fatalf("%s: the harvest on %s never reached its failpoint", label, n)
			}
		}
		mnode := c.nodes[round%len(c.nodes)]
		off := offsets[round%len(offsets)]
		harvested := func(i int, r *result) {
			t.Helper()
			if r.code != 0 {
				t.Fatalf("%s: harvest on %s: %s", label, c.nodes[i], r)
			}
			var out struct {
				Files   int `json:"files"`
				Written *struct {
					Path string `json:"path"`
				} `json:"written"`
			}
			if err := json.Unmarshal([]byte(lastJSON(r.stdout)), &out); err != nil || out.Written == nil || out.Files != 1 {
				t.Fatalf("%s: harvest on %s: want one file written (%v): %s", label, c.nodes[i], err, r)
			}
			layer := filepath.Base(out.Written.Path)
			if _, ok := written[layer]; ok {
				t.Fatalf("%s: harvest on %s reported %s, written before", label, c.nodes[i], layer)
			}
			// The layer holds exactly the job's file (read here, where
			// the file system is the server's own).
			rc, err := bundle.Open(filepath.Join(layerDir, layer), nil)
			if err != nil {
				t.Fatalf("%s: harvest on %s: its layer: %v", label, c.nodes[i], err)
			}
			var names []string
			for _, e := range rc.Entries() {
				if !e.Dir {
					names = append(names, e.Name)
				}
			}
			rc.Close()
			if !slices.Equal(names, []string{files[i]}) {
				t.Fatalf("%s: harvest on %s: layer %s holds %q, want only %s", label, c.nodes[i], layer, names, files[i])
			}
			b, _ := os.ReadFile(c.root(c.nodes[i], filepath.Join(dests[i], files[i])))
			want[files[i]] = string(b)
			written[layer] = files[i]
		}
		mergeArgv := c.onArgv(mnode, nompi, "merge", "--json", "--grace", roundsGrace.String(), set)
		var said string
		if held >= 0 {
			for i, n := range c.nodes {
				if i != held {
					os.WriteFile(filepath.Join(gates, n), nil, 0o644)
				}
			}
			for i, p := range procs {
				if i != held {
					harvested(i, p.wait(t))
				}
			}
			said = merge(round, mnode, run(t, nil, mergeArgv...))
			os.WriteFile(filepath.Join(gates, c.nodes[held]), nil, 0o644)
			harvested(held, procs[held].wait(t))
			said += fmt.Sprintf(", before %s's harvest (held with its number claimed) linked its layer", c.nodes[held])
		} else {
			var mp *proc
			if off < 0 {
				mp = start(t, jobTimeout, nil, mergeArgv...)
				time.Sleep(-off)
			}
			for _, n := range c.nodes {
				os.WriteFile(filepath.Join(gates, n), nil, 0o644)
			}
			if off >= 0 {
				time.Sleep(off)
				mp = start(t, jobTimeout, nil, mergeArgv...)
			}
			for i, p := range procs {
				harvested(i, p.wait(t))
			}
			said = fmt.Sprintf("at %+v: %s", off, merge(round, mnode, mp.wait(t)))
		}
		for i, n := range c.nodes {
			os.RemoveAll(c.root(n, dests[i]))
		}
		os.RemoveAll(gates)
		took = append(took, time.Since(begin))
		check(label, fmt.Sprintf("r%02d", round))
		t.Logf("%s: %v; merge from %s %s; %d layers written so far, %d removed; folder %q",
			label, took[len(took)-1].Round(time.Millisecond), mnode, said, len(written), len(removed), namesIn(layerDir))
	}

	// One more merge past the grace: it removes what the last round's
	// merge folded; the set still holds everything.
	time.Sleep(roundsGrace + 100*time.Millisecond)
	said := merge(rounds+1, c.nodes[2], run(t, nil, c.onArgv(c.nodes[2], nompi, "merge", "--json", "--grace", roundsGrace.String(), set)...))
	check("after the last merge", "last")
	t.Logf("the last merge, from %s: %s; folder %q", c.nodes[2], said, namesIn(layerDir))

	var sum time.Duration
	for _, d := range took {
		sum += d
	}
	t.Logf("%d rounds: %d layers written (%d removed by merges, %d left in the folder); %d of %d merges folded layers, %d said the set changed %q; %v a round on average (longest %v), not counting the checks",
		rounds, len(written), len(removed), len(written)-len(removed), folds, rounds+1, len(refusals), refusals,
		(sum / time.Duration(len(took))).Round(time.Millisecond), slices.Max(took).Round(time.Millisecond))
	c.noStrays(t, kb, 10*time.Second)
}

// ompiTmp is the environment that gives an mpirun a session directory
// of its own: Open MPI 4's mpiruns started at once on one host race to
// make and remove the same /tmp/ompi.HOST.UID ("A call to mkdir was
// unable to create the desired directory ... File exists").
func ompiTmp(t *testing.T) []string {
	t.Helper()
	d, err := os.MkdirTemp(tmpRoot, "ompi-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return []string{"OMPI_MCA_orte_tmpdir_base=" + d}
}

// namesIn lists dir of this machine (names, sorted).
func namesIn(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// lastJSON is the last line of out that starts a JSON object.
func lastJSON(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "{") {
			return lines[i]
		}
	}
	return ""
}
