// Command gencache writes a deterministic synthetic Triton-like kernel
// cache for the demo and the benchmark:
//
//	go run ./internal/cmd/gencache [-kernels N] [-scale F] [-seed S] DIR
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kbundle/kbundle/internal/democache"
)

func main() {
	kernels := flag.Int("kernels", 2000, "kernel directories (7 files each)")
	scale := flag.Float64("scale", 1, "file size multiplier (1: about 250 KB a kernel)")
	seed := flag.Int64("seed", 1, "random seed")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: gencache [-kernels N] [-scale F] [-seed S] DIR")
		os.Exit(2)
	}
	st, err := democache.Generate(flag.Arg(0), democache.Options{Kernels: *kernels, Seed: *seed, Scale: *scale})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gencache:", err)
		os.Exit(1)
	}
	fmt.Printf("%d files, %d bytes in %s\n", st.Files, st.Bytes, flag.Arg(0))
}
