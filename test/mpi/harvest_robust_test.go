package mpi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// harvestEnv: np 2, each rank its own fake node (DEST.node0, DEST.node1).
var harvestEnv = []string{"KBUNDLE_TEST_RANKS_PER_NODE=1"}

// tempTag starts the names of kbundle's temporaries (bundle/temp.go).
const tempTag = ".kbundle-tmp-"

// snapshot is a store folder's files but temporaries (path → digest of
// mode and bytes), and its temporaries' names.
func snapshot(t *testing.T, dir string) (files map[string]string, temps []string) {
	t.Helper()
	files = map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(d.Name(), tempTag) {
			temps = append(temps, rel)
			return nil
		}
		if d.IsDir() {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel] = fmt.Sprintf("%v %x", fi.Mode(), sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(temps)
	return files, temps
}

// thisHost is the host part of this machine's temporary names.
func thisHost() string {
	h, _ := os.Hostname()
	return strings.NewReplacer("-", "_", "/", "_", ".", "_").Replace(h)
}

// decoys puts in dir two temporaries that no harvest may remove: a live
// one (locked by this test process, as a running harvest's is) and
// another host's (dir may be shared by nodes), and returns their names.
func decoys(t *testing.T, dir string) []string {
	t.Helper()
	live := tempTag + thisHost() + "-" + strconv.Itoa(os.Getpid()) + "-decoy"
	f, err := os.OpenFile(filepath.Join(dir, live), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	other := tempTag + "otherhost-1-decoy"
	if err := os.WriteFile(filepath.Join(dir, other), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{live, other}
}

// setFiles is the merged view of the set at path: name → content.
func setFiles(t *testing.T, path string) map[string]string {
	t.Helper()
	s, err := bundle.OpenSet(path, &bundle.OpenOptions{Trusted: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := map[string]string{}
	for _, e := range s.Merged(bundle.CacheUnit) {
		if e.Dir {
			continue
		}
		f, err := s.Read[e.Layer].Open(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f.(io.Reader))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name] = string(b)
	}
	return out
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadedJob packs tree into a fresh set, loads it at 2 ranks on fake
// nodes (DEST.node0, DEST.node1) and writes what the job "compiled":
// "nN/…" names go into node N's DEST. It returns the set, its folder and
// DEST.
func loadedJob(t *testing.T, v testutil.Variant, kb, tree string, compiled map[string]string) (set, store, dest string) {
	t.Helper()
	set = packTree(t, tree)
	dest = filepath.Join(t.TempDir(), "dest")
	if _, se, code := testutil.RunMPI(t, v, 2, harvestEnv, kb, "load", "-q", "--bundle", set, "--to", dest); code != 0 {
		t.Fatalf("load: exit %d\n%s", code, se)
	}
	for n, c := range compiled {
		writeFile(t, filepath.Join(dest+".node"+n[1:2], n), []byte(c))
	}
	return set, filepath.Dir(set), dest
}

// TestHarvestKilled (issue 17): a harvest whose rank 0 or leader is
// SIGKILLed at each step (KBUNDLE_TEST_FAILPOINT) leaves the set's files
// as they were, byte for byte, and no partial layer visible; only a kill
// after the publication leaves the new layer, whole. The next harvest
// removes what the killed one left (its temporary, proved stale by its
// released lock) and nothing else (a live temporary, another host's),
// and succeeds: the set then holds every file the job compiled, once.
func TestHarvestKilled(t *testing.T) {
	tree := makeTree(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), (9<<20)/16) // 3 messages of 4 MiB
	compiled := map[string]string{
		"n0/a.bin":   "compiled on node 0",
		"n0/b.bin":   "also on node 0",
		"n1/big.bin": string(big),
		"n1/c.bin":   "compiled on node 1",
	}
	steps := []struct {
		step string
		rank int
	}{{"announce", 0}, {"announce", 1}, {"transfer", 0}, {"transfer", 1}, {"written", 0}, {"published", 0}}
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			for _, s := range steps {
				t.Run(fmt.Sprintf("%s:%d", s.step, s.rank), func(t *testing.T) {
					set, store, dest := loadedJob(t, v, kb, tree, compiled)
					keep := decoys(t, store)
					before, _ := snapshot(t, store)
					env := append([]string{fmt.Sprintf("KBUNDLE_TEST_FAILPOINT=%s:%d", s.step, s.rank)}, harvestEnv...)
					start := time.Now()
					_, se, code := testutil.RunMPI(t, v, 2, env, kb, "harvest", "--timeout", "60s", "--bundle", set, "--to", dest)
					took := time.Since(start)
					if code == 0 {
						t.Fatalf("the killed harvest exited 0 after %v\n%s", took, se)
					}
					after, left := snapshot(t, store)
					var added []string
					for p, d := range after {
						if before[p] == "" {
							added = append(added, p)
						} else if before[p] != d {
							t.Errorf("%s changed", p)
						}
					}
					for p := range before {
						if after[p] == "" {
							t.Errorf("%s went", p)
						}
					}
					if s.step == "published" {
						// Published whole before the kill: a layer like any other.
						slices.Sort(added)
						if len(added) != 2 || added[0] != "cache.kbundle.d/.000001.claim" || !strings.HasPrefix(added[1], "cache.kbundle.d/000001-") {
							t.Fatalf("killed after publishing: added %q, want one layer and its number's claim", added)
						}
						if got := setFiles(t, set); got["n1/big.bin"] != string(big) || got["n0/a.bin"] != compiled["n0/a.bin"] {
							t.Errorf("the published layer does not hold the job's files")
						}
					} else if len(added) > 0 {
						t.Fatalf("killed at %s: the set gained %q", s.step, added)
					}
					t.Logf("killed at %s on rank %d: exit %d after %v; left %q", s.step, s.rank, code, took.Round(time.Millisecond), left)

					_, se, code = testutil.RunMPI(t, v, 2, harvestEnv, kb, "harvest", "--timeout", "60s", "--bundle", set, "--to", dest)
					if code != 0 {
						t.Fatalf("the next harvest: exit %d\n%s", code, se)
					}
					_, left = snapshot(t, store)
					slices.Sort(keep)
					if !slices.Equal(left, keep) {
						t.Errorf("after the next harvest the store holds temporaries %q, want only the live and the other host's %q", left, keep)
					}
					layers, _ := bundle.ListLayers(set, 0)
					got := setFiles(t, set)
					for n, c := range compiled {
						if got[n] != c {
							t.Errorf("the set lacks %s after the next harvest", n)
						}
					}
					if len(layers) != 1 {
						t.Errorf("layers %v, want one", layers)
					}
				})
			}
		})
	}
}

// waitFor waits (10 s at most) for path to exist.
func waitFor(t *testing.T, path string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s never appeared", path)
}

// TestHarvestTampered (issue 17): node 1's DEST holds a symlink to a
// secret file, a FIFO, another user's file, and a file changed between
// its listing and its sending (the leader stopped by the failpoint just
// after its list went, the file rewritten, the leader continued). The
// changed file fails the harvest on every rank, naming node, rank and
// file, and nothing is published; the next harvest skips and names the
// symlink (never followed: the secret is in no layer), the FIFO (never
// opened: no hang) and the other user's file (never shipped), and
// publishes the rest, the changed file with its new bytes.
func TestHarvestTampered(t *testing.T) {
	tree := makeTree(t)
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			set := packTree(t, tree)
			dest := filepath.Join(t.TempDir(), "dest")
			if _, se, code := testutil.RunMPI(t, v, 2, harvestEnv, kb, "load", "-q", "--bundle", set, "--to", dest); code != 0 {
				t.Fatalf("load: exit %d\n%s", code, se)
			}
			d1 := dest + ".node1"
			secret := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(secret, []byte("SECRET-4f1d"), 0o600); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(d1, "n1/good.bin"), []byte("good"))
			writeFile(t, filepath.Join(d1, "n1/changing.bin"), []byte("first version"))
			if err := os.Symlink(secret, filepath.Join(d1, "n1/link.nbi")); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(d1, "n1/fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
			other := -1
			if os.Geteuid() == 0 {
				other = otherUID(t)
				writeFile(t, filepath.Join(d1, "n1/theirs.bin"), []byte("another user's"))
				if err := os.Chown(filepath.Join(d1, "n1/theirs.bin"), other, -1); err != nil {
					t.Fatal(err)
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), testutil.LaunchTimeout)
			defer cancel()
			cmd := testutil.MPICommand(ctx, v, 2, kb, "harvest", "--timeout", "60s", "--bundle", set, "--to", dest)
			gate := filepath.Join(t.TempDir(), "go")
			cmd.Env = append(cmd.Env, append([]string{"KBUNDLE_TEST_FAILPOINT=announce:1:wait=" + gate}, harvestEnv...)...)
			var se bytes.Buffer
			cmd.Stdout, cmd.Stderr = &se, &se
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, gate+".reached") // rank 1 sent its list and waits
			writeFile(t, filepath.Join(d1, "n1/changing.bin"), []byte("SECOND version"))
			writeFile(t, gate, nil)
			err := cmd.Wait()
			if ctx.Err() != nil {
				t.Fatalf("the harvest hung\n%s", se.String())
			}
			if err == nil || !strings.Contains(se.String(), "n1/changing.bin changed during the harvest") || !strings.Contains(se.String(), "(rank 1)") {
				t.Fatalf("a file changed after its listing: %v, want exit 1 naming rank 1 and the file\n%s", err, se.String())
			}
			for _, l := range strings.Split(se.String(), "\n") {
				if strings.Contains(l, "changed during the harvest") {
					t.Logf("%s", l)
					break
				}
			}
			if layers, _ := filepath.Glob(set + ".d/*"); len(layers) != 0 {
				t.Fatalf("a failed harvest published %v", layers)
			}

			start := time.Now()
			_, out, code := testutil.RunMPI(t, v, 2, harvestEnv, kb, "harvest", "--timeout", "60s", "--bundle", set, "--to", dest)
			if code != 0 {
				t.Fatalf("the next harvest: exit %d\n%s", code, out)
			}
			t.Logf("harvest with a FIFO, a symlink and another user's file: %v", time.Since(start).Round(time.Millisecond))
			skips := []string{"n1/link.nbi (symlink)", "n1/fifo (special file"}
			if other >= 0 {
				skips = append(skips, fmt.Sprintf("n1/theirs.bin (owned by uid %d, not you)", other))
			}
			for _, s := range skips {
				if !strings.Contains(out, s) {
					t.Errorf("the report does not name %s\n%s", s, out)
				}
			}
			got := setFiles(t, set)
			if got["n1/good.bin"] != "good" || got["n1/changing.bin"] != "SECOND version" {
				t.Errorf("the set holds good.bin %q, changing.bin %q", got["n1/good.bin"], got["n1/changing.bin"])
			}
			for n, c := range got {
				if strings.Contains(c, "SECRET") || n == "n1/link.nbi" || n == "n1/fifo" || n == "n1/theirs.bin" {
					t.Errorf("the set holds %s (%q)", n, c)
				}
			}
		})
	}
}

// TestHarvestSignalled: a harvest signalled as scancel or a time limit
// does (SIGTERM or SIGINT to every rank) while rank 0 holds its written,
// unpublished layer (KBUNDLE_TEST_FAILPOINT=written:0:wait=FILE) ends
// within 15 s with 128+N on every rank, publishes nothing, and leaves
// nothing beside the set: rank 0 removes its temporary layer itself, no
// later run needed. The next harvest publishes the job's files.
func TestHarvestSignalled(t *testing.T) {
	tree := makeTree(t)
	compiled := map[string]string{"n0/a.bin": "compiled on node 0", "n1/b.bin": "compiled on node 1"}
	for _, v := range testutil.MPIVariants {
		kb := testutil.Kbundle(t, v)
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			t.Run(string(v)+"/"+sig.String(), func(t *testing.T) {
				set, store, dest := loadedJob(t, v, kb, tree, compiled)
				before, _ := snapshot(t, store)
				ctx, cancel := context.WithTimeout(context.Background(), testutil.LaunchTimeout)
				defer cancel()
				gate := filepath.Join(t.TempDir(), "go")
				wrap, codes := tracedWrapper(t, false)
				cmd := testutil.MPICommand(ctx, v, 2, wrap, kb, "harvest", "--timeout", "60s", "--bundle", set, "--to", dest)
				cmd.Env = append(cmd.Env, append([]string{"KBUNDLE_TEST_FAILPOINT=written:0:wait=" + gate}, append(harvestEnv, keepGoing...)...)...)
				var se bytes.Buffer
				cmd.Stdout, cmd.Stderr = &se, &se
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				waitFor(t, gate+".reached")
				if _, left := snapshot(t, store); len(left) == 0 {
					t.Fatalf("no temporary layer beside the set while rank 0 holds it: the test proves nothing")
				}
				start := time.Now()
				pids := testutil.Processes(kb)
				if len(pids) != 2 {
					t.Errorf("found %d kbundle ranks, want 2", len(pids))
				}
				for _, pid := range pids {
					syscall.Kill(pid, sig)
				}
				cmd.Wait()
				took := time.Since(start)
				if ctx.Err() != nil {
					t.Fatalf("the signalled harvest hung\n%s", se.String())
				}
				settledCodes(t, codes, 2, 128+int(sig), se.String())
				if took > 15*time.Second {
					t.Errorf("took %v to stop", took)
				}
				after, left := snapshot(t, store)
				if len(left) != 0 {
					t.Errorf("left beside the set: %q\n%s", left, se.String())
				}
				if !maps.Equal(before, after) {
					t.Errorf("the set changed: before %v, after %v", before, after)
				}
				t.Logf("%s at written: every rank exit %d after %v", sig, 128+int(sig), took.Round(time.Millisecond))
				if _, out, code := testutil.RunMPI(t, v, 2, harvestEnv, kb, "harvest", "--timeout", "60s", "--bundle", set, "--to", dest); code != 0 {
					t.Fatalf("the next harvest: exit %d\n%s", code, out)
				}
				got := setFiles(t, set)
				for n, c := range compiled {
					if got[n] != c {
						t.Errorf("the set lacks %s after the next harvest", n)
					}
				}
			})
		}
	}
}
