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
	const nodes, size = 3, 20000
	dir := b.TempDir()
	set, dest := filepath.Join(dir, "set.kbundle"), filepath.Join(dir, "dest")
	if _, err := bundle.WriteLayer(context.Background(), set, nil, func(w *bundle.Writer) error {
		for u := range 150 {
			for f := range 10 {
				if err := w.WriteFile(fmt.Sprintf("base-%04d/k%02d.bin", u, f), 0o644, time.Unix(100, 0), unitBytes(uint64(u*10+f), size)); err != nil {
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
				ud := filepath.Join(d, fmt.Sprintf("%s-%04d", prefix, u))
				os.MkdirAll(ud, 0o755)
				for f := range 5 {
					if err := os.WriteFile(filepath.Join(ud, fmt.Sprintf("k%02d.bin", f)), unitBytes(seed+uint64(u*5+f), size), 0o644); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		add("shared", 40, 1<<20)
		add(fmt.Sprintf("own%d", n), 20, uint64(n+2)<<20)
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
