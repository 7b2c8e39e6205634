package harvest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/bundle"
)

// unitBytes is a file of a synthetic cache unit: half random, half a
// pattern (about 2:1 compressible, as compiled kernels roughly are); the
// same seed gives the same bytes.
func unitBytes(seed uint64, size int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, size)
	for i := 0; i < size/2; i++ {
		b[i] = byte(r.Uint32())
	}
	for i := size / 2; i < size; i++ {
		b[i] = byte('a' + i%13)
	}
	return b
}

// BenchmarkHarvest: 3 fake nodes over a base of 150 units of 10 files of
// 20 kB; each node adds 40 units every node adds too and 20 of its own (5
// files each): the workload of scripts/bench/harvest.sh, in one process
// (no MPI, no network file system: what harvest itself costs).
func BenchmarkHarvest(b *testing.B) {
	benchHarvest(b, harvestShape{base: 150, baseFiles: 10, shared: 40, own: 20, files: 5, size: 20000, name: "%s-%04d"})
}

// BenchmarkHarvestTriton: the shape of B3's cache, 10,000 small files a
// node: 3 fake nodes over a base of 1,000 Triton hash directories of 5
// files of 1 kB; each node adds 1,000 directories every node adds too
// and 1,000 of its own. A cost that grows faster than the files shows
// here.
func BenchmarkHarvestTriton(b *testing.B) {
	benchHarvest(b, harvestShape{base: 1000, baseFiles: 5, shared: 1000, own: 1000, files: 5, size: 1000, name: "triton/%s%028x"})
}

// A harvestShape is a benchmark's cache: base units of baseFiles files in
// the set, then on each node shared units (the same on every node) and
// own units of files files, every file size bytes; name formats a unit's
// directory from a prefix and a number.
type harvestShape struct {
	base, baseFiles, shared, own, files, size int
	name                                      string
}

func benchHarvest(b *testing.B, sh harvestShape) {
	const nodes = 3
	size := sh.size
	dir := b.TempDir()
	set, dest := filepath.Join(dir, "set.kbundle"), filepath.Join(dir, "dest")
	if _, err := bundle.WriteLayer(context.Background(), set, nil, func(w *bundle.Writer) error {
		for u := range sh.base {
			for f := range sh.baseFiles {
				if err := w.WriteFile(fmt.Sprintf(sh.name+"/k%02d.bin", "base", u, f), 0o644, time.Unix(100, 0), unitBytes(uint64(u*10+f), size)); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	s, err := bundle.OpenSet(set, &bundle.OpenOptions{Trusted: true})
	if err != nil {
		b.Fatal(err)
	}
	for n := range nodes {
		d := fmt.Sprintf("%s.node%d", dest, n)
		if _, err := s.Read[len(s.Read)-1].Extract(context.Background(), d, &bundle.ExtractOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
		add := func(prefix string, units int, seed uint64) {
			for u := range units {
				ud := filepath.Join(d, fmt.Sprintf(sh.name, prefix, u))
				os.MkdirAll(ud, 0o755)
				for f := range sh.files {
					if err := os.WriteFile(filepath.Join(ud, fmt.Sprintf("k%02d.bin", f)), unitBytes(seed+uint64(u*sh.files+f), size), 0o644); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		add("shared", sh.shared, 1<<20)
		add(fmt.Sprintf("own%d", n), sh.own, uint64(n+2)<<20)
	}
	s.Close()
	world := broadcasttest.World(0, 1, 2)
	b.ResetTimer()
	for range b.N {
		os.RemoveAll(set + ".d")
		res := broadcasttest.OnEveryRank(world, func(c *broadcasttest.Comm) error {
			_, err := Run(context.Background(), c, Plan{Bundle: set, Dest: dest, Host: fmt.Sprintf("kbn%d", c.Rank()), RanksPerNode: 1})
			return err
		})
		for r, err := range res {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
}

// BenchmarkChoose: rank 0's choice over 3 leaders' lists, each of 2,000
// Triton hash directories of 5 files (10,000 files, as B3's cache), 1,000
// directories shared by every node and 1,000 its own, against a set of
// 1,000 other directories: what choose costs beyond reading the lists.
func BenchmarkChoose(b *testing.B) {
	const nodes, units, files = 3, 2000, 5
	have := map[string]string{}
	for u := range 1000 {
		for f := range files {
			have[fmt.Sprintf("triton/%032x/k%d.bin", u+1<<40, f)] = "xxh3-128:1"
		}
	}
	lists := make([]*list, nodes)
	for r := range lists {
		l := &list{Host: fmt.Sprintf("n%d", r), First: r, Last: r}
		for u := range units {
			id := u
			if u >= units/2 {
				id = u + r<<20 // the node's own
			}
			for f := range files {
				l.Files = append(l.Files, File{Name: fmt.Sprintf("triton/%032x/k%d.bin", id, f), Size: 100, Dig: fmt.Sprintf("xxh3-128:%x", id), New: true})
			}
		}
		lists[r] = l
	}
	b.ResetTimer()
	for b.Loop() {
		sum, _ := choose(lists, have)
		if sum.Units != units/2*(nodes+1) {
			b.Fatalf("chose %d units, want %d", sum.Units, units/2*(nodes+1))
		}
	}
}
