package main

import (
	"fmt"
	"sort"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

// bundleJSON are the fields `kbundle info --json` and `kbundle pack
// --json` share: what the bundle holds, its sizes and digests. Digest is
// the whole file's in bare hex, as it always was; FileDigest the same
// with its algorithm, the canonical form (docs/json.md, "Canonical
// names").
type bundleJSON struct {
	jsonHead
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
	// FileDigest is the whole file's digest, "xxh3-128:..."; ContentDigest
	// the digest of the entries alone: the same for the same tree packed
	// anywhere, any time (docs/FORMAT.md, "Content digest").
	FileDigest    string `json:"file_digest"`
	ContentDigest string `json:"content_digest"`
}

// infoJSON is the stable `kbundle info --json` object: fields are only
// ever added.
type infoJSON struct {
	bundleJSON
	Version     int               `json:"version"`
	SegmentSize int64             `json:"segment_size"`
	Meta        map[string]string `json:"meta"`
	// Layers are the set's delta layers above the base (docs/FORMAT.md,
	// "Sets"), in load order; SetContentDigest is the merged view's (the
	// base's when there is no layer).
	Layers           []layerJSON `json:"layers"`
	SetContentDigest string      `json:"set_content_digest"`
	// What --max-size sees (docs/FORMAT.md, "Pruning"): the merged
	// view's raw size and cache units, the set's use records, and how
	// many units they give a last use.
	SetRawBytes   int64 `json:"set_raw_bytes"`
	SetUnits      int   `json:"set_units"`
	UseRecords    int   `json:"use_records"`
	UnitsRecorded int   `json:"units_recorded"`
}

// manyUseRecords is how many use records make info suggest kbundle
// merge of a set with layers, which folds them into one as it writes the
// new base (each harvest that compiled nothing new still writes one, a
// file on the shared file system; harvest folds them past 32).
const manyUseRecords = 8

// layerJSON is one delta layer of a set; Digest is FileDigest, under
// its older name.
type layerJSON struct {
	Path          string `json:"path"`
	Entries       int    `json:"entries"`
	PackedBytes   int64  `json:"packed_bytes"`
	Digest        string `json:"digest"`
	ContentDigest string `json:"content_digest"`
	FileDigest    string `json:"file_digest"`
}

func init() {
	register(&cli.Command{
		Name:      "info",
		Usage:     "describe a bundle: counts, sizes, digest and where it was made",
		UsageText: "kbundle info [FILE] [--json]",
		Description: "Reads the index only; it does not check the contents (kbundle verify does).\n" +
			"FILE is a bundle or a set's base (its layers are listed); default $KBUNDLE_BUNDLE, else\n" +
			"$KBUNDLE_CACHE_DIR/cache.kbundle, as for load.\n" +
			"Names and metadata holding control characters are printed Go-quoted.",
		Flags:  []cli.Flag{jsonFlag},
		Action: infoAction,
	})
}

// readSet fills in what the set of base name holds besides the base:
// its layers, the set's content digest, cache units and raw size, and
// the use records beside arg (the path as given). A bundle that is no
// set's base is a set of itself.
func (in *infoJSON) readSet(name, arg string) {
	if set, err := bundle.OpenSet(name, nil); err == nil {
		for i, r := range set.Read[1:] {
			d := bundle.FormatDigest(r.FileDigest())
			in.Layers = append(in.Layers, layerJSON{Path: set.Layers[i+1].Path, Entries: len(r.Entries()), PackedBytes: r.Size(),
				Digest: d, ContentDigest: bundle.FormatDigest(r.ContentDigest()), FileDigest: d})
		}
		in.SetContentDigest = bundle.FormatDigest(set.ContentDigest(bundle.CacheUnit))
		var uses map[string]bundle.Use
		if u, err := bundle.ReadUses(arg, nil); err == nil {
			uses, in.UseRecords = u.Units, len(u.Records)
		}
		units := set.Units(bundle.CacheUnit, uses)
		in.SetUnits, in.SetRawBytes = len(units), set.RawSize(bundle.CacheUnit)
		for _, u := range units {
			if u.Recorded {
				in.UnitsRecorded++
			}
		}
		set.Close()
	} else {
		in.SetRawBytes = in.RawBytes
	}
}

func infoAction(c *cli.Context) error {
	rc, name, err := openArg(c)
	if err != nil {
		return err
	}
	defer rc.Close()
	in := infoJSON{bundleJSON: bundleJSON{jsonHead: okHead(), Path: name, RawBytes: rc.RawSize(),
		DataBytes: rc.DataSize(), PackedBytes: rc.Size(), Ratio: ratio(rc.RawSize(), rc.Size()),
		Segments: rc.Segments(), Digest: rc.FileDigest().String(), FileDigest: bundle.FormatDigest(rc.FileDigest()),
		ContentDigest: bundle.FormatDigest(rc.ContentDigest())},
		Version: bundle.Version, SegmentSize: rc.SegmentSize(), Meta: rc.Meta()}
	for _, e := range rc.Entries() {
		if e.Dir {
			in.Dirs++
		} else {
			in.Files++
		}
	}
	in.Entries = in.Files + in.Dirs
	in.Layers, in.SetContentDigest = []layerJSON{}, in.ContentDigest
	in.readSet(name, c.Args().First())
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
	if len(in.Layers) > 0 || in.UseRecords > 0 {
		line := fmt.Sprintf("set:       %s, %s raw (what --max-size bounds); %d of them with a recorded use (%s",
			plural(in.SetUnits, "cache unit", "cache units"), human(in.SetRawBytes), in.UnitsRecorded, plural(in.UseRecords, "use record", "use records"))
		if in.UseRecords >= manyUseRecords && len(in.Layers) > 0 { // merge writes a new base then, and folds them into one (U51)
			line += ", a file each beside the set: kbundle merge folds them into one"
		}
		fmt.Fprintln(w, line+")")
	}
	return nil
}
