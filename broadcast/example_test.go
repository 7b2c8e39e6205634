package broadcast_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/mpi"
)

// A program loads its kernel cache at start-up on every rank, and goes
// on without it when the bundle cannot be used. Built without the mpi
// tag, the world is one rank and this runs as is.
func ExampleLoadBundle() {
	// Make a tiny cache and bundle for the example.
	tmp, _ := os.MkdirTemp("", "kbundle-example-")
	defer os.RemoveAll(tmp)
	cache := filepath.Join(tmp, "cache")
	os.MkdirAll(filepath.Join(cache, "triton"), 0o755)
	os.WriteFile(filepath.Join(cache, "triton", "k.json"), []byte(`{"kernel":1}`), 0o644)
	store := filepath.Join(tmp, "store")
	os.Mkdir(store, 0o700)
	if _, err := bundle.Pack(context.Background(), cache, filepath.Join(store, broadcast.BundleName), nil); err != nil {
		log.Fatal(err)
	}

	if err := mpi.Init(); err != nil {
		log.Fatal(err)
	}
	defer mpi.Finalize()
	world := mpi.World()

	// Collective: every rank gets the same bytes or the same error.
	r, err := broadcast.LoadBundle(world, broadcast.WithDir(store))
	switch {
	case errors.Is(err, broadcast.ErrNoBundle):
		// Same error, with rank 0's reason, on every rank: compile cold.
		if world.Rank() == 0 {
			log.Printf("starting without the kernel cache: %v", err)
		}
	case err != nil:
		log.Fatal(err) // the communicator failed
	default:
		b, _ := r.ReadEntry("triton/k.json")
		if world.Rank() == 0 {
			fmt.Printf("%d entries; triton/k.json = %s\n", len(r.Entries()), b)
		}
	}

	// A missing bundle is an error, not a hang.
	_, err = broadcast.LoadBundle(world, broadcast.WithPath(filepath.Join(tmp, "none.kbundle")))
	fmt.Println(errors.Is(err, broadcast.ErrNoBundle))
	// Output:
	// 2 entries; triton/k.json = {"kernel":1}
	// true
}
