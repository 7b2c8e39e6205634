package load_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/democache"
	"github.com/kbundle/kbundle/internal/testutil/tree"
	"github.com/kbundle/kbundle/load"
)

// testBundle packs a generated cache (many segments) into a private
// directory.
func testBundle(t *testing.T) (src, file string) {
	t.Helper()
	src = filepath.Join(t.TempDir(), "cache")
	if _, err := democache.Generate(src, democache.Options{Kernels: 40, Scale: 0.5, Seed: 3}); err != nil {
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

// run loads file on a fake world of the given nodes, each node with its
// own Dest under base (dest(k) for node k), and returns each rank's result.
func run(t *testing.T, nodes []int, plan func(rank int) load.Plan, corrupt map[int]func([]byte)) ([]*load.Summary, []error) {
	world := broadcasttest.World(nodes...)
	for r, f := range corrupt {
		world[r].Corrupt = f
	}
	sums := make([]*load.Summary, len(nodes))
	errs := broadcasttest.OnEveryRank(world, func(c *broadcasttest.Comm) error {
		p := plan(c.Rank())
		p.Parents = true // each test's node directories are made by the load
		s, err := load.Run(context.Background(), c, p)
		sums[c.Rank()] = s
		return err
	})
	return sums, errs
}

// nothingUnder fails if dir holds anything but keep.
func nothingUnder(t *testing.T, dir string, keep ...string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		ok := false
		for _, k := range keep {
			ok = ok || e.Name() == k
		}
		if !ok {
			t.Errorf("left in %s: %s", dir, e.Name())
		}
	}
}

func TestRunNodes(t *testing.T) {
	src, file := testBundle(t)
	slow := map[int]func([]byte){2: func([]byte) { time.Sleep(2 * time.Millisecond) }}
	for _, c := range []struct {
		name  string
		nodes []int
		chunk int64
		slow  map[int]func([]byte)
	}{
		{"one rank", []int{0}, 0, nil},
		{"3 nodes x 2", []int{0, 0, 1, 1, 2, 2}, 0, nil},
		{"uneven nodes, chunk not dividing", []int{0, 1, 1, 1}, 100003, nil},
		{"tiny chunks", []int{0, 0, 1}, 4093, nil},
		{"one leader slower than the others", []int{0, 1, 2}, 65536, slow},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			// The broadcasts the last node's leader receives: the stream
			// goes in chunks of the plan's size (or in one).
			last := slices.Index(c.nodes, c.nodes[len(c.nodes)-1])
			received := 0
			hooks := maps.Clone(c.slow)
			if hooks == nil && last > 0 {
				hooks = map[int]func([]byte){last: func([]byte) { received++ }}
			}
			sums, errs := run(t, c.nodes, func(rank int) load.Plan {
				return load.Plan{Bundle: file, Dest: filepath.Join(base, fmt.Sprintf("n%d", c.nodes[rank]), "dest"),
					ChunkSize: c.chunk, Window: 1, Host: fmt.Sprintf("kbn%d", c.nodes[rank])}
			}, hooks)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for n := range c.nodes[len(c.nodes)-1] + 1 {
				tree.Same(t, src, filepath.Join(base, fmt.Sprintf("n%d", n), "dest"), tree.Options{Mtimes: true})
				nothingUnder(t, filepath.Join(base, fmt.Sprintf("n%d", n)), "dest")
			}
			if s := sums[0]; s.Nodes != c.nodes[len(c.nodes)-1]+1 || s.Entries == 0 || s.Held == 0 {
				t.Errorf("summary %+v", s)
			}
			if c.slow == nil && last > 0 {
				want := 1 // the whole bundle in one
				if c.chunk > 0 {
					want = int(sums[0].Bytes / c.chunk) // at least, in chunks
				}
				// Besides the stream: the set check and the agreements'.
				if received < want || c.chunk == 0 && received > 4 {
					t.Errorf("leader of the last node received %d broadcasts of a %d-byte bundle in chunks of %d", received, sums[0].Bytes, c.chunk)
				}
			}
		})
	}
}

// TestRunAllOrNothing: a failure on one node leaves no DEST anywhere, and
// every rank gets the same error naming the host and its ranks.
func TestRunAllOrNothing(t *testing.T) {
	_, file := testBundle(t)
	nodes := []int{0, 0, 1, 1, 2, 2}
	for _, c := range []struct {
		name     string
		setup    func(t *testing.T, nodeDir string) // node 1's parent of DEST
		corrupt  map[int]func([]byte)
		want     string
		unusable bool
	}{
		{"dest exists on one node", func(t *testing.T, d string) {
			os.MkdirAll(filepath.Join(d, "dest"), 0o700)
			os.WriteFile(filepath.Join(d, "dest", "mine"), []byte("x"), 0o600)
		}, nil, "kbn1 (ranks 2-3): ", false},
		{"a file at dest on one node", func(t *testing.T, d string) {
			os.MkdirAll(d, 0o700)
			os.WriteFile(filepath.Join(d, "dest"), []byte("x"), 0o600)
		}, nil, "kbn1 (ranks 2-3): ", false},
		{"damaged in transfer to one node", nil, map[int]func([]byte){2: flipLast()}, "kbn1 (ranks 2-3): ", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			if c.setup != nil {
				c.setup(t, filepath.Join(base, "n1"))
			}
			_, errs := run(t, nodes, func(rank int) load.Plan {
				return load.Plan{Bundle: file, Dest: filepath.Join(base, fmt.Sprintf("n%d", nodes[rank]), "dest"),
					Host: fmt.Sprintf("kbn%d", nodes[rank]), Window: 1}
			}, c.corrupt)
			for r, err := range errs {
				if err == nil || err.Error() != errs[0].Error() {
					t.Fatalf("rank %d: %v (rank 0: %v)", r, err, errs[0])
				}
				if !strings.Contains(err.Error(), c.want) {
					t.Fatalf("rank %d: %q does not name %q", r, err, c.want)
				}
				if errors.Is(err, broadcast.ErrNoBundle) != c.unusable {
					t.Fatalf("rank %d: %v: ErrNoBundle=%v", r, err, !c.unusable)
				}
			}
			nothingUnder(t, filepath.Join(base, "n0"))
			nothingUnder(t, filepath.Join(base, "n2"))
			nothingUnder(t, filepath.Join(base, "n1"), "dest")
		})
	}
}

// flipLast flips a byte of the body as received: the middle of the
// second broadcast (the set check with the stream's status, then the
// prelude and the body in one, since the test bundle is shorter than a
// chunk; its body is far longer than its prelude).
func flipLast() func([]byte) { return flipNth(2) }

// flipPrelude flips a byte of the index as received: the second
// broadcast's 21st byte, after the header's 16.
func flipPrelude() func([]byte) { return flipAt(2, func(int) int { return 20 }) }

// flipNth flips the middle byte of the n-th buffer received.
func flipNth(n int) func([]byte) { return flipAt(n, func(l int) int { return l / 2 }) }

// flipAt flips byte at(len) of the n-th buffer received.
func flipAt(n int, at func(int) int) func([]byte) {
	i := 0
	return func(b []byte) {
		if i++; i == n {
			b[at(len(b))] ^= 0x40
		}
	}
}

// TestRunSinkFails: a leader whose sink fails at Begin (its prelude
// damaged in transfer; a bundle recording a preset this kbundle does not
// know) neither crashes nor hangs: every rank gets the same ErrNoBundle and
// nothing is left.
func TestRunSinkFails(t *testing.T) {
	src, file := testBundle(t)
	future := filepath.Join(filepath.Dir(file), "future.kbundle")
	if _, err := bundle.Pack(context.Background(), src, future, &bundle.PackOptions{SegmentSize: bundle.MinSegmentSize,
		Meta: map[string]string{bundle.MetaPreset: "triton,fromthefuture"}}); err != nil {
		t.Fatal(err)
	}
	// A body damaged in the file itself: every node fails to decode
	// it, and the failure is said once, by rank 0, for the file.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	damaged := filepath.Join(filepath.Dir(file), "damaged.kbundle")
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := []int{0, 0, 1, 1}
	for _, c := range []struct {
		name, file, want string
		corrupt          map[int]func([]byte)
		once             bool // rank 0's failure alone: the file's, not a node's
	}{
		{"prelude damaged in transfer to one node", file, "kbn1 (ranks 2-3): ", map[int]func([]byte){2: flipPrelude()}, false},
		{"a preset of a newer kbundle", future, "fromthefuture", nil, true},
		{"damaged in the file", damaged, damaged, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			_, errs := run(t, nodes, func(rank int) load.Plan {
				return load.Plan{Bundle: c.file, Dest: filepath.Join(base, fmt.Sprintf("n%d", nodes[rank]), "dest"),
					Host: fmt.Sprintf("kbn%d", nodes[rank]), Window: 1, UseRecorded: true}
			}, c.corrupt)
			for r, err := range errs {
				if !errors.Is(err, broadcast.ErrNoBundle) || !strings.Contains(err.Error(), c.want) || err.Error() != errs[0].Error() {
					t.Fatalf("rank %d: %v (rank 0: %v)", r, err, errs[0])
				}
				var e *broadcast.Error
				if c.once && (!errors.As(err, &e) || e.Ranks != 1 || len(e.Reasons) != 1 || strings.Contains(err.Error(), "kbn1")) {
					t.Errorf("rank %d: %v: not said once, for the file (%+v)", r, err, e)
				}
			}
			nothingUnder(t, base, "n0", "n1")
			nothingUnder(t, filepath.Join(base, "n0"))
			nothingUnder(t, filepath.Join(base, "n1"))
		})
	}
}

func TestRunNoBundle(t *testing.T) {
	base := t.TempDir()
	_, errs := run(t, []int{0, 1}, func(rank int) load.Plan {
		return load.Plan{Bundle: filepath.Join(base, "missing.kbundle"), Dest: filepath.Join(base, fmt.Sprint(rank), "d")}
	}, nil)
	for r, err := range errs {
		if !errors.Is(err, broadcast.ErrNoBundle) || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	nothingUnder(t, base)
}

// TestRunInterrupted: a node whose context is cancelled (a signal) fails
// the load everywhere, naming the node and the cancellation's cause, and
// every rank's error matches context.Canceled.
func TestRunInterrupted(t *testing.T) {
	_, file := testBundle(t)
	base := t.TempDir()
	nodes := []int{0, 0, 1, 1}
	cause := fmt.Errorf("interrupted by test: %w", context.Canceled)
	world := broadcasttest.World(nodes...)
	errs := broadcasttest.OnEveryRank(world, func(c *broadcasttest.Comm) error {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		if nodes[c.Rank()] == 1 {
			cancel(cause)
		}
		_, err := load.Run(ctx, c, load.Plan{Bundle: file, Dest: filepath.Join(base, fmt.Sprintf("n%d", nodes[c.Rank()]), "dest"),
			Host: fmt.Sprintf("kbn%d", nodes[c.Rank()]), Parents: true})
		return err
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "kbn1 (ranks 2-3): interrupted by test") {
			t.Fatalf("rank %d: %v", r, err)
		}
		if !errors.Is(err, context.Canceled) || errors.Is(err, broadcast.ErrNoBundle) {
			t.Fatalf("rank %d: %v: should match context.Canceled and not ErrNoBundle", r, err)
		}
	}
	nothingUnder(t, filepath.Join(base, "n0"))
	nothingUnder(t, filepath.Join(base, "n1"))
}

// TestRunGuessableDestTaken: a default Dest that another user made in
// advance on one node (W6) moves the load, on every node, to the same
// unguessable sibling; the other user's directory is left alone. Without
// GuessableDest the load fails, naming the node.
func TestRunGuessableDestTaken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a directory of another user")
	}
	_, file := testBundle(t)
	nodes := []int{0, 0, 1, 1}
	for _, c := range []struct {
		guessable, damaged bool
	}{{true, false}, {false, false}, {true, true}} {
		t.Run(fmt.Sprintf("guessable=%v/damaged=%v", c.guessable, c.damaged), func(t *testing.T) {
			base := t.TempDir()
			theirs := filepath.Join(base, "n1", "dest")
			if err := os.MkdirAll(theirs, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chown(theirs, 65534, 65534)
			os.Mkdir(filepath.Join(base, "n0"), 0o755) // there node 0 claims its Dest, then moves
			var corrupt map[int]func([]byte)
			if c.damaged {
				// The body: in the third broadcast here, after the
				// destination check's and the set check's (with the
				// stream's status), with the prelude.
				corrupt = map[int]func([]byte){2: flipNth(3)}
			}
			sums, errs := run(t, nodes, func(rank int) load.Plan {
				return load.Plan{Bundle: file, Dest: filepath.Join(base, fmt.Sprintf("n%d", nodes[rank]), "dest"),
					Host: fmt.Sprintf("kbn%d", nodes[rank]), GuessableDest: c.guessable}
			}, corrupt)
			if c.damaged {
				// The moved Dest, made empty before staging, goes too.
				for r, err := range errs {
					if !errors.Is(err, broadcast.ErrNoBundle) {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				nothingUnder(t, filepath.Join(base, "n0"))
				nothingUnder(t, filepath.Join(base, "n1"), "dest")
				return
			}
			if !c.guessable {
				for r, err := range errs {
					if err == nil || !strings.Contains(err.Error(), "kbn1 (ranks 2-3): ") || !strings.Contains(err.Error(), "owned by uid 65534") {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				nothingUnder(t, filepath.Join(base, "n0"))
				return
			}
			suffix := ""
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				s := sums[r]
				want := filepath.Join(base, fmt.Sprintf("n%d", nodes[r]), "dest")
				if s.Taken != want || s.TakenNodes != 1 || !strings.HasPrefix(s.Dest, want+"-") || len(s.Dest) != len(want)+17 {
					t.Fatalf("rank %d: Dest %q Taken %q (%d nodes), want %s-<16 hex digits>", r, s.Dest, s.Taken, s.TakenNodes, want)
				}
				if suffix == "" {
					suffix = s.Dest[len(want):]
				} else if s.Dest[len(want):] != suffix {
					t.Fatalf("rank %d: Dest %q: another name than rank 0's (%s)", r, s.Dest, suffix)
				}
				if _, err := os.Stat(filepath.Join(s.Dest, bundle.InstalledMarker)); err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if ents, _ := os.ReadDir(theirs); len(ents) != 0 {
				t.Fatalf("the other user's directory was written into: %v", ents)
			}
			nothingUnder(t, filepath.Join(base, "n0"), "dest"+suffix) // node 0's claim of the guessable name is gone
		})
	}
}

// TestRunForceKeepsBundle is S9 for load: `load --force --bundle
// DEST/cache.kbundle --to DEST` deleted the bundle with the old tree.
// Rank 0, which opened the bundle, refuses its node's DEST; the failure
// is agreed, so no node replaces its tree.
func TestRunForceKeepsBundle(t *testing.T) {
	_, file := testBundle(t)
	base := t.TempDir()
	dest := func(node int) string { return filepath.Join(base, fmt.Sprintf("n%d", node), "dest") }
	nodes := []int{0, 0, 1, 1}
	rc, err := bundle.Open(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 2 {
		os.Mkdir(filepath.Dir(dest(k)), 0o700)
		if _, err := rc.Extract(context.Background(), dest(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	rc.Close()
	inside := filepath.Join(dest(0), "cache.kbundle")
	data, _ := os.ReadFile(file)
	if err := os.WriteFile(inside, data, 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dest(1), "mine"), []byte("old tree"), 0o600)
	_, errs := run(t, nodes, func(r int) load.Plan {
		return load.Plan{Bundle: inside, Dest: dest(nodes[r]), Force: true, Host: fmt.Sprintf("kbn%d", nodes[r])}
	}, nil)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "holds the bundle being extracted") {
			t.Fatalf("rank %d: %v, want the destination refused: it holds the bundle", r, err)
		}
		if !strings.Contains(err.Error(), "kbn0 (ranks 0-1)") {
			t.Fatalf("rank %d: %v, want rank 0's node named", r, err)
		}
	}
	if _, err := os.Stat(inside); err != nil {
		t.Fatalf("the bundle is gone: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dest(1), "mine")); err != nil || string(b) != "old tree" {
		t.Fatalf("node 1's tree was replaced: %q %v", b, err)
	}
	nothingUnder(t, filepath.Dir(dest(0)), "dest")
	nothingUnder(t, filepath.Dir(dest(1)), "dest")
}

// TestRunDestCreatedDuringLoad: another user who makes the default Dest
// while it is being staged (its temporary sibling shows the name), with a
// file in it, can no longer make the load fail (S4 of the 2026-12-01
// review): every leader claimed Dest before staging. A load that fails
// leaves no claimed Dest behind. An explicit Dest has no claim; then the
// install fails saying what happened.
func TestRunDestCreatedDuringLoad(t *testing.T) {
	_, file := testBundle(t)
	nodes := []int{0, 0, 1, 1}
	for _, c := range []struct {
		name               string
		guessable, damaged bool
	}{{"default dest", true, false}, {"default dest, load fails", true, true}, {"explicit dest", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			if !c.guessable && os.Geteuid() != 0 {
				t.Skip("needs root to make a directory of another user")
			}
			base := t.TempDir()
			dest := func(node int) string { return filepath.Join(base, fmt.Sprintf("n%d", node), "dest") }
			for _, n := range []int{0, 1} { // each node's /tmp
				if err := os.Mkdir(filepath.Dir(dest(n)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var made error = errors.New("the hook did not run")
			// Node 1's leader, between its staging and the install.
			other := func() map[string]string {
				made = os.Mkdir(dest(1), 0o755)
				if made == nil {
					os.WriteFile(filepath.Join(dest(1), "theirs"), []byte("x"), 0o644)
					if os.Geteuid() == 0 {
						os.Chown(filepath.Join(dest(1), "theirs"), 65534, 65534)
						os.Chown(dest(1), 65534, 65534)
					}
				}
				return nil
			}
			var corrupt map[int]func([]byte)
			if c.damaged {
				corrupt = map[int]func([]byte){2: flipLast()}
			}
			sums, errs := run(t, nodes, func(rank int) load.Plan {
				p := load.Plan{Bundle: file, Dest: dest(nodes[rank]), Host: fmt.Sprintf("kbn%d", nodes[rank]), GuessableDest: c.guessable}
				if rank == 2 {
					p.HostInfo = other
				}
				return p
			}, corrupt)
			switch {
			case c.damaged:
				for r, err := range errs {
					if !errors.Is(err, broadcast.ErrNoBundle) {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				nothingUnder(t, filepath.Join(base, "n0"))
				nothingUnder(t, filepath.Join(base, "n1"))
			case c.guessable:
				if !errors.Is(made, os.ErrExist) {
					t.Errorf("another user could make Dest during the load: %v", made)
				}
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
					if s := sums[r]; s.Dest != dest(nodes[r]) || s.Taken != "" {
						t.Fatalf("rank %d: Dest %q Taken %q", r, s.Dest, s.Taken)
					}
					if _, err := os.Stat(filepath.Join(dest(nodes[r]), bundle.InstalledMarker)); err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
			default:
				if made != nil {
					t.Fatalf("the hook could not make Dest: %v", made)
				}
				for r, err := range errs {
					if err == nil || !strings.Contains(err.Error(), "kbn1 (ranks 2-3): "+dest(1)+": destination refused: another user, uid 65534") ||
						!strings.Contains(err.Error(), "created it during the load") {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				nothingUnder(t, filepath.Join(base, "n0"))
				nothingUnder(t, filepath.Join(base, "n1"), "dest")
				nothingUnder(t, dest(1), "theirs")
			}
		})
	}
}

// TestRunDestRacedByRealUser is TestRunDestCreatedDuringLoad with real
// users, as the review's reproducer: the load runs as uid 65534 (this test
// binary, copied and run again), Dest's parent is a root-owned sticky
// directory (as /tmp), and this process, as root, creates Dest for uid
// 65533 as soon as a temporary appears there. Needs root.
func TestRunDestRacedByRealUser(t *testing.T) {
	if os.Getenv("KBUNDLE_TEST_LOAD_AS_USER") != "" {
		return // the child's own run of this test: see TestRunAsUserChild
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run as other users")
	}
	_, file := testBundle(t)
	top, err := os.MkdirTemp("", "kbundle-race-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(top)
	tmp := filepath.Join(top, "tmp")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{top, 0o755}, {filepath.Join(top, "b"), 0o755}, {tmp, 0o777 | os.ModeSticky}} {
		if err := os.MkdirAll(d.path, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(file)
	bundleFile := filepath.Join(top, "b", "cache.kbundle")
	exe := filepath.Join(top, "b", "load.test")
	self, _ := os.ReadFile(os.Args[0])
	if os.WriteFile(bundleFile, b, 0o644) != nil || os.WriteFile(exe, self, 0o755) != nil {
		t.Fatal("cannot copy the bundle and the test binary")
	}
	raced := 0
	for i := 0; i < 5 && raced < 2; i++ {
		dest := filepath.Join(tmp, fmt.Sprintf("kbundle-nobody-%d", i))
		stop := make(chan struct{})
		made := make(chan error, 1)
		go func() { // the other user: poll for a temporary, then make Dest
			for {
				select {
				case <-stop:
					made <- nil
					return
				default:
				}
				ents, _ := os.ReadDir(tmp)
				for _, e := range ents {
					if strings.Contains(e.Name(), ".kbundle-tmp-") {
						err := os.Mkdir(dest, 0o755)
						if err == nil {
							os.Chown(dest, 65533, 65533)
							err = errors.New("made it")
						}
						made <- err
						return
					}
				}
			}
		}()
		cmd := exec.Command(exe, "-test.run=^TestRunAsUserChild$", "-test.v")
		cmd.Env = append(os.Environ(), "KBUNDLE_TEST_LOAD_AS_USER=1", "KBUNDLE_TEST_BUNDLE="+bundleFile, "KBUNDLE_TEST_DEST="+dest)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		close(stop)
		got := <-made
		if got == nil {
			t.Logf("run %d: the load ended before a temporary showed", i)
			continue
		}
		raced++
		if err != nil || !errors.Is(got, os.ErrExist) {
			t.Fatalf("run %d: the other user's mkdir: %v; the load: %v\n%s", i, got, err, out)
		}
		if _, err := os.Stat(filepath.Join(dest, bundle.InstalledMarker)); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if raced == 0 {
		t.Skip("no run showed a temporary before the load ended")
	}
}

// TestRunAsUserChild is the load TestRunDestRacedByRealUser runs as
// another user.
func TestRunAsUserChild(t *testing.T) {
	if os.Getenv("KBUNDLE_TEST_LOAD_AS_USER") == "" {
		t.Skip("run by TestRunDestRacedByRealUser")
	}
	c := broadcasttest.World(0)[0]
	s, err := load.Run(context.Background(), c, load.Plan{Bundle: os.Getenv("KBUNDLE_TEST_BUNDLE"),
		Dest: os.Getenv("KBUNDLE_TEST_DEST"), GuessableDest: true, Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Taken != "" {
		t.Fatalf("moved to %s: the name was taken before the load", s.Dest)
	}
}
