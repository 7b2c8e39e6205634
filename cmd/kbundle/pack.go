package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "pack",
		Usage:     "pack a cache directory into one bundle file",
		UsageText: "kbundle pack [--dir DIR] [-o FILE] [--level NAME] [--jobs N] [--exclude GLOB]... [--json] [-q]",
		Description: "Packs DIR (default $KBUNDLE_CACHE_DIR) into FILE (default DIR/cache.kbundle),\n" +
			"written to a temporary file beside FILE and renamed when complete. Memory: up to\n" +
			"2 x N segments of 8 MiB (raw and compressed) are in flight, about 20-25 MiB per\n" +
			"worker (-j); lower --jobs under a tight memory limit.",
		Flags: []cli.Flag{dirFlag, outputFlag, levelFlag, jobsFlag, excludeFlag, jsonFlag, quietFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("pack takes no arguments (got %q); use --dir", safe(c.Args().First())), exitUsage)
			}
			dir := c.String("dir")
			if dir == "" {
				return cli.Exit("no cache directory: pass --dir DIR or set KBUNDLE_CACHE_DIR", exitUsage)
			}
			start := time.Now()
			res, err := packDir(c, dir, c.String("output"), "")
			if err != nil {
				return err
			}
			return reportPack(c, res, time.Since(start))
		},
	})
}

// packDir packs dir to out (default dir/cache.kbundle) with the shared
// flags of c, showing progress.
func packDir(c *cli.Context, dir, out, preset string) (*bundle.PackResult, error) {
	lvl, err := level(c)
	if err != nil {
		return nil, err
	}
	n, err := jobs(c)
	if err != nil {
		return nil, err
	}
	if out == "" {
		out = filepath.Join(dir, "cache.kbundle")
	}
	if out == "-" {
		return nil, cli.Exit("a bundle is written to a file, not to stdout: pass -o FILE (./- for a file named -)", exitUsage)
	}
	for _, g := range c.StringSlice("exclude") {
		if _, err := path.Match(g, ""); err != nil {
			return nil, cli.Exit(fmt.Sprintf("--exclude %q: %v", g, err), exitUsage)
		}
	}
	bar := newProgress(c, "packing")
	res, err := bundle.Pack(c.Context, dir, out, &bundle.PackOptions{
		Level: lvl, Jobs: n, Exclude: c.StringSlice("exclude"),
		Preset: preset, Progress: bar.update,
	})
	bar.done()
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("cannot pack %s: %v", safe(dir), err), exitError)
	}
	return res, nil
}

// packJSON is `kbundle pack --json`; fields are only ever added.
type packJSON struct {
	bundleJSON
	Skipped []string `json:"skipped"`
	Seconds float64  `json:"seconds"`
}

// reportPack prints what pack did: what was skipped (always), then a
// summary line on stderr (unless --quiet) or the JSON object on stdout.
func reportPack(c *cli.Context, res *bundle.PackResult, took time.Duration) error {
	for _, s := range res.Skipped {
		fmt.Fprintf(c.App.ErrWriter, "kbundle: not packed (not a regular file or directory): %s\n", safe(s))
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, packJSON{bundleJSON: bundleJSON{Path: res.Path, Entries: res.Entries(),
			Files: res.Files, Dirs: res.Dirs, RawBytes: res.RawBytes, DataBytes: res.DataBytes,
			PackedBytes: res.PackedBytes, Ratio: ratio(res.RawBytes, res.PackedBytes), Segments: res.Segments,
			Digest: res.Digest.String()}, Skipped: append([]string{}, res.Skipped...), Seconds: took.Seconds()})
	}
	say(c, "%s", packSummary(res, took))
	return nil
}

// packSummary is the one-line summary of a pack.
func packSummary(res *bundle.PackResult, took time.Duration) string {
	s := fmt.Sprintf("packed %s and %s, %s (%s distinct) into %s: %s, ratio %.1f, %s",
		plural(res.Files, "file", "files"), plural(res.Dirs, "directory", "directories"),
		human(res.RawBytes), human(res.DataBytes), safe(res.Path), human(res.PackedBytes),
		ratio(res.RawBytes, res.PackedBytes), plural(res.Segments, "segment", "segments"))
	if took > 0 {
		s += fmt.Sprintf(", in %s", elapsed(took))
	}
	return s
}

// printPackResult prints pack's report for warm --pack.
func printPackResult(res *bundle.PackResult) {
	for _, s := range res.Skipped {
		fmt.Fprintf(os.Stderr, "kbundle: not packed (not a regular file or directory): %s\n", safe(s))
	}
	fmt.Fprintf(os.Stderr, "kbundle: %s\n", packSummary(res, 0))
}
