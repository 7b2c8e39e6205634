package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/warmup"
	"github.com/urfave/cli/v2"
)

// Flags shared by the commands that write bundles (pack, warm).
var (
	levelFlag = &cli.StringFlag{Name: "level", Value: "default", EnvVars: []string{"KBUNDLE_LEVEL"},
		Usage: "compression level: " + bundle.LevelNames}
	jobsFlag = &cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, EnvVars: []string{"KBUNDLE_JOBS"},
		Usage: "parallel workers (0: all cores)"}
	excludeFlag = &cli.StringSliceFlag{Name: "exclude", Usage: "skip paths matching `GLOB` (relative path or base name; repeatable)"}
	outputFlag  = &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "bundle `FILE` to write (default: DIR/cache.kbundle)"}
	dirFlag     = &cli.StringFlag{Name: "dir", EnvVars: []string{"KBUNDLE_CACHE_DIR"}, Usage: "cache `DIR`ectory"}
)

func init() {
	register(&cli.Command{
		Name:      "pack",
		Usage:     "pack a cache directory into one bundle file",
		UsageText: "kbundle pack [--dir DIR] [-o FILE] [--level NAME] [--jobs N] [--exclude GLOB]... [--preset NAME]...",
		Flags:     []cli.Flag{dirFlag, outputFlag, levelFlag, jobsFlag, excludeFlag, presetFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("pack takes no arguments (got %q); use --dir", c.Args().First()), exitUsage)
			}
			dir := c.String("dir")
			if dir == "" {
				return cli.Exit("no cache directory: pass --dir DIR or set KBUNDLE_CACHE_DIR", exitUsage)
			}
			// Recorded in the bundle so that load applies them by default.
			presets, err := lookupPresets(c.StringSlice("preset"))
			if err != nil {
				return cli.Exit(err.Error(), exitUsage)
			}
			res, err := packDir(c, dir, c.String("output"), presetNames(presets))
			if err != nil {
				return err
			}
			if missing, _ := warmup.MissingContent(os.DirFS(dir), presets); len(missing) > 0 {
				warmWarn("%s holds nothing for preset %s: was it filled by that framework?", dir, presetNames(missing))
			}
			printPackResult(res)
			return nil
		},
	})
}

// packDir packs dir to out (default dir/cache.kbundle) with the shared
// flags of c, showing progress on a terminal.
func packDir(c *cli.Context, dir, out, preset string) (*bundle.PackResult, error) {
	level, err := bundle.ParseLevel(c.String("level"))
	if err != nil {
		return nil, cli.Exit(err.Error(), exitUsage)
	}
	if out == "" {
		out = filepath.Join(dir, "cache.kbundle")
	}
	bar := newProgress("packing")
	res, err := bundle.Pack(c.Context, dir, out, &bundle.PackOptions{
		Level: level, Jobs: c.Int("jobs"), Exclude: c.StringSlice("exclude"),
		Preset: preset, Progress: bar.update,
	})
	bar.done()
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("cannot pack %s: %v", dir, err), exitError)
	}
	return res, nil
}

func printPackResult(res *bundle.PackResult) {
	for _, s := range res.Skipped {
		fmt.Fprintf(os.Stderr, "kbundle: not packed (not a regular file or directory): %s\n", s)
	}
	fmt.Fprintf(os.Stderr, "kbundle: packed %d files and %d directories, %s (%s distinct) into %s: %s, ratio %.1f, %d segments\n",
		res.Files, res.Dirs, human(res.RawBytes), human(res.DataBytes), res.Path, human(res.PackedBytes),
		ratio(res.RawBytes, res.PackedBytes), res.Segments)
}

func ratio(raw, packed int64) float64 {
	if packed == 0 {
		return 0
	}
	return float64(raw) / float64(packed)
}
