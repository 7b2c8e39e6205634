package main

import (
	"fmt"
	"sort"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

// bundleJSON are the fields `kbundle info --json` and `kbundle pack
// --json` share: what the bundle holds and its sizes.
type bundleJSON struct {
	Path        string  `json:"path"`
	Entries     int     `json:"entries"`
	Files       int     `json:"files"`
	Dirs        int     `json:"dirs"`
	RawBytes    int64   `json:"raw_bytes"`
	DataBytes   int64   `json:"data_bytes"`
	PackedBytes int64   `json:"packed_bytes"`
	Ratio       float64 `json:"ratio"`
	Segments    int     `json:"segments"`
	Digest      string  `json:"digest"`
}

// infoJSON is the stable `kbundle info --json` object: fields are only
// ever added.
type infoJSON struct {
	bundleJSON
	Version     int               `json:"version"`
	SegmentSize int64             `json:"segment_size"`
	Meta        map[string]string `json:"meta"`
	// ContentDigest is the digest of the entries alone, with its
	// algorithm ("xxh3-128:..."): the same for the same tree packed
	// anywhere, any time (docs/FORMAT.md, "Content digest").
	ContentDigest string `json:"content_digest"`
	// Layers are the set's delta layers above the base (docs/FORMAT.md,
	// "Sets"), in load order; SetContentDigest is the merged view's (the
	// base's when there is no layer).
	Layers           []layerJSON `json:"layers"`
	SetContentDigest string      `json:"set_content_digest"`
}

// layerJSON is one delta layer of a set.
type layerJSON struct {
	Path          string `json:"path"`
	Entries       int    `json:"entries"`
	PackedBytes   int64  `json:"packed_bytes"`
	Digest        string `json:"digest"`
	ContentDigest string `json:"content_digest"`
}

func init() {
	register(&cli.Command{
		Name:      "info",
		Usage:     "describe a bundle: counts, sizes, digest and where it was made",
		UsageText: "kbundle info FILE [--json]",
		Description: "Reads the index only; it does not check the contents (kbundle verify does).\n" +
			"Names and metadata holding control characters are printed Go-quoted.",
		Flags:  []cli.Flag{jsonFlag},
		Action: infoAction,
	})
}

func infoAction(c *cli.Context) error {
	rc, err := openArg(c)
	if err != nil {
		return err
	}
	defer rc.Close()
	in := infoJSON{bundleJSON: bundleJSON{Path: c.Args().First(), RawBytes: rc.RawSize(),
		DataBytes: rc.DataSize(), PackedBytes: rc.Size(), Ratio: ratio(rc.RawSize(), rc.Size()),
		Segments: rc.Segments(), Digest: rc.FileDigest().String()},
		Version: bundle.Version, SegmentSize: rc.SegmentSize(), Meta: rc.Meta(), ContentDigest: bundle.FormatDigest(rc.ContentDigest())}
	for _, e := range rc.Entries() {
		if e.Dir {
			in.Dirs++
		} else {
			in.Files++
		}
	}
	in.Entries = in.Files + in.Dirs
	in.Layers, in.SetContentDigest = []layerJSON{}, in.ContentDigest
	if set, err := bundle.OpenSet(c.Args().First(), nil); err == nil {
		for i, r := range set.Read[1:] {
			in.Layers = append(in.Layers, layerJSON{Path: set.Layers[i+1].Path, Entries: len(r.Entries()), PackedBytes: r.Size(),
				Digest: bundle.FormatDigest(r.FileDigest()), ContentDigest: bundle.FormatDigest(r.ContentDigest())})
		}
		in.SetContentDigest = bundle.FormatDigest(set.ContentDigest(bundle.CacheUnit))
		set.Close()
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, in)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "bundle:    %s (format version %d)\n", safe(in.Path), in.Version)
	fmt.Fprintf(w, "entries:   %d (%s, %s)\n", in.Entries, plural(in.Files, "file", "files"), plural(in.Dirs, "directory", "directories"))
	fmt.Fprintf(w, "size:      %s raw, %s distinct, %s packed (ratio %.1f)\n", human(in.RawBytes), human(in.DataBytes), human(in.PackedBytes), in.Ratio)
	fmt.Fprintf(w, "segments:  %d of %s\n", in.Segments, human(in.SegmentSize))
	fmt.Fprintf(w, "digest:    xxh3-128:%s (not checked; run kbundle verify)\n", in.Digest)
	fmt.Fprintf(w, "content:   %s (the entries alone: the same wherever and whenever they were packed)\n", in.ContentDigest)
	keys := make([]string, 0, len(in.Meta))
	for k := range in.Meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	width := 16 // the keys line up: toolchain.cuda_runtime is the longest kbundle writes
	for _, k := range keys {
		if n := len(safe(k)) + 1; n > width && n <= 32 {
			width = n
		}
	}
	for _, k := range keys {
		fmt.Fprintf(w, "%-*s %s\n", width, safe(k)+":", safe(cut(in.Meta[k], 100)))
	}
	if len(in.Layers) > 0 {
		fmt.Fprintf(w, "layers:    %d, loaded with the base as one set (content %s; kbundle merge folds them)\n", len(in.Layers), in.SetContentDigest)
		for _, l := range in.Layers {
			fmt.Fprintf(w, "  %s: %s, %s packed, content %s\n", safe(l.Path), plural(l.Entries, "entry", "entries"), human(l.PackedBytes), l.ContentDigest)
		}
	}
	return nil
}
