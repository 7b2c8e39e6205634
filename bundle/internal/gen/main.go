// Command gen writes kbundle's test vectors (package vectors) and their
// expected outcomes (vectors.tsv) into a directory, by default
// bundle/testdata/vectors. Run it from the module root after changing the
// vectors:
//
//	go run ./bundle/internal/gen
//
// It only ever writes into that one directory and removes from it only
// *.kbundle files that are no longer vectors.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kbundle/kbundle/bundle/internal/gen/vectors"
)

func main() {
	out := flag.String("o", filepath.Join("bundle", "testdata", "vectors"), "output `dir`ectory")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintf(os.Stderr, "gen: %v\n", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	vs := vectors.All()
	keep := map[string]bool{}
	for _, v := range vs {
		name := v.Name + ".kbundle"
		keep[name] = true
		if err := os.WriteFile(filepath.Join(dir, name), v.Data, 0o644); err != nil {
			return err
		}
	}
	old, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range old {
		if strings.HasSuffix(e.Name(), ".kbundle") && !keep[e.Name()] {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "vectors.tsv"), vectors.TSV(vs), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "content-digests.tsv"), vectors.ContentDigests(vs), 0o644); err != nil {
		return err
	}
	fmt.Printf("gen: wrote %d vectors to %s\n", len(vs), dir)
	return nil
}
