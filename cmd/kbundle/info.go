package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

// openArg opens the bundle named by the command's only argument.
func openArg(c *cli.Context, usage string) (*bundle.ReadCloser, error) {
	if c.NArg() != 1 {
		return nil, cli.Exit("usage: "+usage, exitUsage)
	}
	rc, err := bundle.Open(c.Args().First(), nil)
	if err != nil {
		return nil, bundleExit(err)
	}
	if u := rc.Untrusted(); u != nil {
		fmt.Fprintf(os.Stderr, "kbundle: warning: extract and load will refuse this bundle: %v\n", u)
	}
	return rc, nil
}

// infoJSON is the stable `kbundle info --json` object: fields are only
// ever added.
type infoJSON struct {
	Path        string            `json:"path"`
	Version     int               `json:"version"`
	Entries     int               `json:"entries"`
	Files       int               `json:"files"`
	Dirs        int               `json:"dirs"`
	RawBytes    int64             `json:"raw_bytes"`
	DataBytes   int64             `json:"data_bytes"`
	PackedBytes int64             `json:"packed_bytes"`
	Ratio       float64           `json:"ratio"`
	Segments    int               `json:"segments"`
	SegmentSize int64             `json:"segment_size"`
	Digest      string            `json:"digest"`
	Meta        map[string]string `json:"meta"`
}

func init() {
	register(&cli.Command{
		Name:      "info",
		Usage:     "describe a bundle: counts, sizes, digest and where it was made",
		UsageText: "kbundle info FILE [--json]",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
		Action: func(c *cli.Context) error {
			rc, err := openArg(c, "kbundle info FILE [--json]")
			if err != nil {
				return err
			}
			defer rc.Close()
			in := infoJSON{Path: c.Args().First(), Version: bundle.Version, RawBytes: rc.RawSize(),
				DataBytes: rc.DataSize(), PackedBytes: rc.Size(), Ratio: ratio(rc.RawSize(), rc.Size()),
				Segments: rc.Segments(), SegmentSize: rc.SegmentSize(), Digest: rc.FileDigest().String(), Meta: rc.Meta()}
			for _, e := range rc.Entries() {
				if e.Dir {
					in.Dirs++
				} else {
					in.Files++
				}
			}
			in.Entries = in.Files + in.Dirs
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(in)
			}
			fmt.Printf("bundle:    %s (format version %d)\n", bundle.Printable(in.Path), in.Version)
			fmt.Printf("entries:   %d (%d files, %d directories)\n", in.Entries, in.Files, in.Dirs)
			fmt.Printf("size:      %s raw, %s distinct, %s packed (ratio %.1f)\n", human(in.RawBytes), human(in.DataBytes), human(in.PackedBytes), in.Ratio)
			fmt.Printf("segments:  %d of %s\n", in.Segments, human(in.SegmentSize))
			fmt.Printf("digest:    xxh3-128:%s\n", in.Digest)
			keys := make([]string, 0, len(in.Meta))
			for k := range in.Meta {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				v := in.Meta[k]
				if len(v) > 100 {
					v = v[:97] + "..."
				}
				fmt.Printf("%-16s %s\n", k+":", bundle.Printable(v))
			}
			return nil
		},
	})
}
