package harvest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/bundle"
)

// install makes a set at set from files (none: an empty base) and
// extracts it to dest.node0, dest.node1, … (one per node), as load does.
func install(t *testing.T, set, dest string, nodes int, files map[string]string) {
	t.Helper()
	if _, err := bundle.WriteLayer(context.Background(), set, nil, func(w *bundle.Writer) error {
		for n, c := range files {
			if err := w.WriteFile(n, 0o644, time.Unix(100, 0), []byte(c)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	installed(t, set, dest, nodes)
}

func installed(t *testing.T, set, dest string, nodes int) {
	t.Helper()
	s, err := bundle.OpenSet(set, &bundle.OpenOptions{Trusted: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for n := 0; n < nodes; n++ {
		if _, err := s.Read[len(s.Read)-1].Extract(context.Background(), fmt.Sprintf("%s.node%d", dest, n), &bundle.ExtractOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// installMissing installs what load --allow-missing does where no set
// exists yet at set: an empty tree, its record naming set.
func installMissing(t *testing.T, set, dest string, nodes int) {
	t.Helper()
	s, err := bundle.EmptySet(set)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < nodes; n++ {
		if _, err := s.Read[0].Extract(context.Background(), fmt.Sprintf("%s.node%d", dest, n), nil); err != nil {
			t.Fatal(err)
		}
	}
}

func write(t *testing.T, dest, name, content string) {
	t.Helper()
	p := filepath.Join(dest, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run harvests on a world of nodes fake nodes, ranksPerNode ranks each.
func run(t *testing.T, set, dest string, nodes, ranksPerNode int) []*Summary {
	t.Helper()
	sums, errs := runEach(set, dest, nodes, ranksPerNode, func(*Plan) {})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return sums
}

// runEach harvests on a world of nodes fake nodes of ranksPerNode ranks
// (hosts kbnN), the plan changed by edit: every rank's summary and error.
func runEach(set, dest string, nodes, ranksPerNode int, edit func(*Plan)) ([]*Summary, []error) {
	ids := make([]int, nodes*ranksPerNode)
	for i := range ids {
		ids[i] = i / ranksPerNode
	}
	type out struct {
		s   *Summary
		err error
	}
	res := broadcasttest.OnEveryRank(broadcasttest.World(ids...), func(c *broadcasttest.Comm) out {
		p := Plan{Bundle: set, Dest: dest, Host: fmt.Sprintf("kbn%d", c.Rank()/ranksPerNode), RanksPerNode: ranksPerNode, Chunk: 7}
		edit(&p)
		s, err := Run(context.Background(), c, p)
		return out{s, err}
	})
	var sums []*Summary
	var errs []error
	for _, o := range res {
		sums, errs = append(sums, o.s), append(errs, o.err)
	}
	return sums, errs
}

func layerFiles(t *testing.T, p string) map[string]string {
	t.Helper()
	r, err := bundle.Open(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := map[string]string{}
	for _, e := range r.Entries() {
		if e.Dir {
			continue
		}
		f, _ := r.Open(e.Name)
		b, err := io.ReadAll(f.(io.Reader))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name] = string(b)
	}
	return out
}

// The Numba conflict: two nodes each add a different signature
// to one function, both write f.1.nbc with different bytes; the unit
// comes whole from one node (the lowest rank).
func TestNumbaConflictWholeUnit(t *testing.T) {
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 2, map[string]string{"numba/other.nbi": "o"})
	write(t, dest+".node0", "numba/mod/f-10.py312.nbi", "index A")
	write(t, dest+".node0", "numba/mod/f-10.py312.1.nbc", "code A")
	write(t, dest+".node1", "numba/mod/f-10.py312.nbi", "index B")
	write(t, dest+".node1", "numba/mod/f-10.py312.1.nbc", "code B (longer)")
	write(t, dest+".node1", "numba/mod/f-10.py312.2.nbc", "code B2")
	write(t, dest+".node1", "numba/mod/g-3.py312.nbi", "g") // only on node 1
	write(t, dest+".node0", "same.bin", "identical")        // on both nodes
	write(t, dest+".node1", "same.bin", "identical")
	sums := run(t, set, dest, 2, 2)
	s := sums[0]
	for r := range sums {
		if sums[r].Layer != s.Layer {
			t.Fatalf("rank %d got another outcome", r)
		}
	}
	if s.Layer == "" || s.Base {
		t.Fatalf("no layer written: %+v", s)
	}
	got := layerFiles(t, s.Layer)
	want := map[string]string{
		"numba/mod/f-10.py312.nbi":   "index A",
		"numba/mod/f-10.py312.1.nbc": "code A",
		"numba/mod/g-3.py312.nbi":    "g",
		"same.bin":                   "identical",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("layer holds %v\nwant %v (f's unit whole from node 0, nothing of node 1's f)", got, want)
	}
	if s.Nodes[0].Entries != 3 || s.Nodes[1].Entries != 5 || s.Nodes[1].Elsewhere != 1 || s.Nodes[1].Chosen != 1 {
		t.Errorf("node reports: %+v", s.Nodes)
	}
	if n := s.Nodes[1]; len(s.Nodes) != 2 || n.Host != "kbn1" || n.FirstRank != 2 || n.LastRank != 3 {
		t.Errorf("node 1's report: %+v", n)
	}
	// The set's merged view holds node 0's unit.
	os_, err := bundle.OpenSet(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer os_.Close()
	if !os_.HasDeltas() {
		t.Error("the set has no layer")
	}
}

// A job that compiled nothing writes no layer.
func TestNothingCompiledNoLayer(t *testing.T) {
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 2, map[string]string{"a/b.nbi": "x", "triton/" + strings.Repeat("A", 52) + "/__grp__k.json": "{}"})
	// Rewritten with the same bytes: a new mtime, but not changed.
	write(t, dest+".node1", "a/b.nbi", "x")
	s := run(t, set, dest, 2, 1)[0]
	if s.Layer != "" || s.Files != 0 {
		t.Fatalf("layer written for a job that compiled nothing: %+v", s)
	}
	if _, err := os.Stat(bundle.LayerDir(set)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("layer directory made: %v", err)
	}
}

// The first harvest into a missing set writes its base; skips are named.
func TestFirstHarvestAndSkips(t *testing.T) {
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	installMissing(t, set, dest, 1)
	d := dest + ".node0"
	h := strings.Repeat("B", 52)
	write(t, d, "triton/"+h+"/k.cubin", "cubin")
	write(t, d, "triton/"+h+"/__grp__k.json", `{"child_paths": {"k.cubin": "`+d+`/triton/`+h+`/k.cubin"}}`)
	os.WriteFile(filepath.Join(dir, "secret"), []byte("secret"), 0o600)
	os.Symlink(filepath.Join(dir, "secret"), filepath.Join(d, "link"))
	syscall.Mkfifo(filepath.Join(d, "fifo"), 0o644)
	write(t, d, "x.kbundle", "a bundle")
	write(t, d, "unreadable", "u")
	os.Chmod(filepath.Join(d, "unreadable"), 0)
	write(t, d, "theirs", "t")
	if os.Geteuid() == 0 {
		os.Chown(filepath.Join(d, "theirs"), 12345, 12345)
	}
	s := run(t, set, dest, 1, 1)[0]
	if !s.Base || s.Layer != set {
		t.Fatalf("first harvest: %+v, want the set's base", s)
	}
	got := layerFiles(t, set)
	if os.Geteuid() == 0 {
		delete(got, "unreadable") // root reads it
	}
	if len(got) != 2 || got["triton/"+h+"/k.cubin"] != "cubin" {
		t.Errorf("base holds %v", got)
	}
	why := map[string]string{}
	for _, sk := range s.Nodes[0].Skipped {
		why[sk.Name] = sk.Why
	}
	for n, w := range map[string]string{"link": "symlink", "fifo": "special", "x.kbundle": "kbundle's own"} {
		if !strings.Contains(why[n], w) {
			t.Errorf("%s: skipped as %q, want %q", n, why[n], w)
		}
	}
	if os.Geteuid() == 0 && !strings.Contains(why["theirs"], "not you") {
		t.Errorf("theirs: skipped as %q", why["theirs"])
	}
	if os.Geteuid() != 0 && !strings.Contains(why["unreadable"], "unreadable") {
		t.Errorf("unreadable: skipped as %q", why["unreadable"])
	}
}

// A unit that changed goes whole, its unchanged files too; harvesting the
// same DEST again (no load in between) writes nothing.
func TestUnitWholeAndNoRepeat(t *testing.T) {
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 1, map[string]string{"n/f-1.py312.nbi": "i1", "n/f-1.py312.1.nbc": "c1", "n/h.nbi": "h"})
	write(t, dest+".node0", "n/f-1.py312.nbi", "i2")
	write(t, dest+".node0", "n/f-1.py312.2.nbc", "c2")
	s := run(t, set, dest, 1, 1)[0]
	got := layerFiles(t, s.Layer)
	want := map[string]string{"n/f-1.py312.nbi": "i2", "n/f-1.py312.1.nbc": "c1", "n/f-1.py312.2.nbc": "c2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("layer %v, want %v", got, want)
	}
	if s.Nodes[0].Entries != 2 {
		t.Errorf("compiled %d entries, want 2 (the unchanged .1.nbc is not counted)", s.Nodes[0].Entries)
	}
	if again := run(t, set, dest, 1, 1)[0]; again.Layer != "" {
		t.Errorf("second harvest of the same DEST wrote %s", again.Layer)
	}
}

// The failpoint's steps, in order: a leader announces its list and sends
// bytes; rank 0 receives the lists, adds a file, writes and publishes.
func TestFailpointSteps(t *testing.T) {
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 2, map[string]string{"old.bin": "o"})
	write(t, dest+".node0", "a.bin", "from node 0")
	write(t, dest+".node1", "b.bin", "from node 1")
	world := broadcasttest.World(0, 1)
	steps := broadcasttest.OnEveryRank(world, func(c *broadcasttest.Comm) []string {
		var got []string
		plan := Plan{Bundle: set, Dest: dest, Host: "kbn", RanksPerNode: 1, Chunk: 4, Failpoint: func(s string) { got = append(got, s) }}
		if _, err := Run(context.Background(), c, plan); err != nil {
			t.Error(err)
		}
		return got
	})
	if fmt.Sprint(steps) != "[[announce transfer written claimed published] [announce transfer]]" {
		t.Errorf("steps per rank: %v", steps)
	}
}

// Two nodes of one job disagree about a name being a file or a directory
// (a file x on one, x/y on the other), or a job replaced a directory of
// DEST by a file: the layer is a tree, the lowest rank's unit kept and
// the other reported skipped on its node; the set then loads and merges
// (H1 of the 2026-12-01b review: the layer held x and x/y, and every
// later load failed).
func TestNodesDisagreeOnKind(t *testing.T) {
	type node []string // in order: "name=content" writes a file, "-name" removes name
	cases := []struct {
		name  string
		base  map[string]string
		nodes []node
		layer map[string]string   // the layer's files
		skip  []map[string]string // per node: name → a part of why
		view  map[string]string   // the set's files after the harvest
	}{
		{"a directory on node 0, a file on node 1",
			map[string]string{"base": "b"},
			[]node{{"x/y=node 0"}, {"x=node 1"}},
			map[string]string{"x/y": "node 0"},
			[]map[string]string{nil, {"x": "a file here and a directory on kbn0 (rank 0), whose x/y the harvest takes"}},
			map[string]string{"base": "b", "x/y": "node 0"}},
		{"a file on node 0, a directory on node 1",
			map[string]string{"base": "b"},
			[]node{{"x=node 0"}, {"x/y/z=node 1", "w=w1"}},
			map[string]string{"x": "node 0", "w": "w1"},
			[]map[string]string{nil, {"x/y/z": "below x, a file on kbn0 (rank 0), which the harvest takes"}},
			map[string]string{"base": "b", "x": "node 0", "w": "w1"}},
		{"a Numba unit below another node's file, left out whole",
			map[string]string{"base": "b"},
			[]node{{"m=a file"}, {"m/f-1.py312.nbi=i", "m/f-1.py312.1.nbc=c"}},
			map[string]string{"m": "a file"},
			[]map[string]string{nil, {"m/f-1.py312.nbi": "kbn0 (rank 0)", "m/f-1.py312.1.nbc": "kbn0 (rank 0)"}},
			map[string]string{"base": "b", "m": "a file"}},
		{"the job replaced a directory of DEST by a file",
			map[string]string{"numba/sub/k1": "a", "numba/k2": "b"},
			[]node{{"-numba/sub", "numba/sub=now a file"}, {}},
			map[string]string{"numba/sub": "now a file"},
			nil,
			map[string]string{"numba/sub": "now a file", "numba/k2": "b"}},
		{"the job replaced a file of DEST by a directory",
			map[string]string{"numba/sub": "a", "numba/k2": "b"},
			[]node{{"-numba/sub", "numba/sub/k1=new"}, {}},
			map[string]string{"numba/sub/k1": "new"},
			nil,
			map[string]string{"numba/sub/k1": "new", "numba/k2": "b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
			install(t, set, dest, len(tc.nodes), tc.base)
			for i, n := range tc.nodes {
				d := fmt.Sprintf("%s.node%d", dest, i)
				for _, op := range n {
					if name, ok := strings.CutPrefix(op, "-"); ok {
						if err := os.RemoveAll(filepath.Join(d, name)); err != nil {
							t.Fatal(err)
						}
						continue
					}
					name, c, _ := strings.Cut(op, "=")
					write(t, d, name, c)
				}
			}
			s := run(t, set, dest, len(tc.nodes), 1)[0]
			if s.Layer == "" {
				t.Fatalf("no layer: %+v", s)
			}
			if got := layerFiles(t, s.Layer); !maps.Equal(got, tc.layer) {
				t.Errorf("layer %v, want %v", got, tc.layer)
			}
			for i, n := range s.Nodes {
				var want map[string]string
				if i < len(tc.skip) {
					want = tc.skip[i]
				}
				got := map[string]string{}
				for _, sk := range n.Skipped {
					got[sk.Name] = sk.Why
				}
				if len(got) != len(want) {
					t.Errorf("node %d skipped %v, want %v", i, got, want)
				}
				for name, why := range want {
					if !strings.Contains(got[name], why) {
						t.Errorf("node %d: %s skipped as %q, want %q", i, name, got[name], why)
					}
				}
			}
			// The set loads, with the layer's view, and merges.
			os_, err := bundle.OpenSet(set, &bundle.OpenOptions{Trusted: true})
			if err != nil {
				t.Fatalf("the set no longer opens: %v", err)
			}
			st, err := os_.Read[0].Stage(context.Background(), filepath.Join(dir, "next"), os_.StageOptions(bundle.ExtractOptions{}))
			if err != nil {
				os_.Close()
				t.Fatalf("the next load fails: %v", err)
			}
			st.Abort()
			view := map[string]string{}
			for _, e := range os_.Merged(bundle.CacheUnit) {
				if !e.Dir {
					b, _ := os_.Read[e.Layer].ReadFile(e.Name)
					view[e.Name] = string(b)
				}
			}
			os_.Close()
			if !maps.Equal(view, tc.view) {
				t.Errorf("the set's view %v, want %v", view, tc.view)
			}
			if _, err := bundle.MergeSet(context.Background(), set, &bundle.MergeOptions{Unit: bundle.CacheUnit}); err != nil {
				t.Fatalf("merge: %v", err)
			}
			r, err := bundle.Open(set, nil)
			if err != nil {
				t.Fatalf("the merged base does not open: %v", err)
			}
			r.Close()
		})
	}
}

// choose settles the tree before the Writer checks the names: names a
// leader should never send (absolute, "..", a file and its child in one
// list) end its walk up the parents and are resolved or left to the
// Writer to refuse; choose never hangs on them.
func TestChooseOddNames(t *testing.T) {
	f := func(name string) File { return File{Name: name, Size: 1, Dig: name, New: true} }
	lists := []*list{
		{Host: "kbn0", Files: []File{f("/etc/evil"), f("../../up"), f("p")}},
		{Host: "kbn1", First: 1, Last: 1, Files: []File{f("/etc"), f("p/q"), f("a//b"), f("/")}},
	}
	done := make(chan [][]int, 1)
	go func() { _, c := choose(lists, nil); done <- c }()
	select {
	case c := <-done:
		var got []string
		for r, is := range c {
			for _, i := range is {
				got = append(got, lists[r].Files[i].Name)
			}
		}
		if want := []string{"/etc/evil", "../../up", "p", "a//b", "/"}; !slices.Equal(got, want) {
			t.Errorf("chose %q, want %q (p/q below node 0's file p, /etc above its /etc/evil)", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("choose hangs")
	}
}
