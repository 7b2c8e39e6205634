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
		Usage: fmt.Sprintf("parallel workers (0: all cores; at most 4 per core are used; 0..%d)", bundle.MaxJobs),
		Action: func(_ *cli.Context, n int) error {
			if n < 0 || n > bundle.MaxJobs {
				return cli.Exit(fmt.Sprintf("--jobs (or KBUNDLE_JOBS) %d: must be 0 (all cores) to %d", n, bundle.MaxJobs), exitUsage)
			}
			return nil
		}}
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
			printPackResult(dir, res)
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

// listMax is how many skipped, copied or writable entries pack names
// before it only counts the rest.
const listMax = 20

func printList(format string, items []string) {
	for i, s := range items {
		if i == listMax {
			fmt.Fprintf(os.Stderr, "kbundle: ... and %d more\n", len(items)-listMax)
			break
		}
		fmt.Fprintf(os.Stderr, format, s)
	}
}

// printPackResult reports a pack: what was skipped or stored as a copy,
// the summary, then warnings about what would make the bundle useless or
// unsafe: empty, written from a tree others can write, refused by load.
func printPackResult(dir string, res *bundle.PackResult) {
	printList("kbundle: not packed (not a regular file or directory): %s\n", res.Skipped)
	printList("kbundle: symlink stored as a copy of its target: %s\n", res.Copied)
	fmt.Fprintf(os.Stderr, "kbundle: packed %d files and %d directories, %s (%s distinct) into %s: %s, ratio %.1f, %d segments\n",
		res.Files, res.Dirs, human(res.RawBytes), human(res.DataBytes), res.Path, human(res.PackedBytes),
		ratio(res.RawBytes, res.PackedBytes), res.Segments)
	if len(res.Skipped) > 0 {
		fmt.Fprintf(os.Stderr, "kbundle: hint: %d entries were not packed (symlinks out of the directory or to directories, devices, sockets, FIFOs): a cache that needs them will miss after a load\n", len(res.Skipped))
	}
	if res.Files == 0 {
		fmt.Fprintf(os.Stderr, "kbundle: warning: %s holds no files: the bundle is empty, and loading it warms nothing\n", dir)
		fmt.Fprintf(os.Stderr, "kbundle: hint: check --dir, and that the warm-up's framework wrote its cache there (kbundle warm --preset NAME)\n")
	}
	if len(res.Writable) > 0 {
		fmt.Fprintf(os.Stderr, "kbundle: warning: %d entries of %s could be written by someone other than you or root:\n", len(res.Writable), dir)
		printList("kbundle:   %s\n", res.Writable)
		fmt.Fprintf(os.Stderr, "kbundle: hint: whoever can write the cache chooses the code your jobs run, and the bundle, being yours, will be trusted by load: warm into a directory only you can write (chmod -R go-w %s) and pack again\n", dir)
	}
	if res.Untrusted != nil {
		fmt.Fprintf(os.Stderr, "kbundle: warning: kbundle load will refuse this bundle (exit 3): %v\n", res.Untrusted)
		fmt.Fprintf(os.Stderr, "kbundle: hint: the bundle, and every directory on the way to it, must be yours or root's and not writable by others; to share one with a project group or from a service account, see KBUNDLE_TRUSTED_GROUPS and KBUNDLE_TRUSTED_OWNERS in docs/troubleshooting.md\n")
	}
}

func ratio(raw, packed int64) float64 {
	if packed == 0 {
		return 0
	}
	return float64(raw) / float64(packed)
}
