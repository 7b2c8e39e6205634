package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/hostinfo"
	"github.com/kbundle/kbundle/preset"
	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "pack",
		Usage:     "pack a cache directory into one bundle file",
		UsageText: "kbundle pack [--dir DIR] [-o FILE] [--level NAME] [--jobs N] [--exclude GLOB]... [--preset NAME]... [--json] [-q]",
		Description: "Packs DIR (default $KBUNDLE_CACHE_DIR) into FILE (default DIR/cache.kbundle),\n" +
			"written to a temporary file beside FILE and renamed when complete. Memory: up to\n" +
			"2 x N segments of 8 MiB (raw and compressed) are in flight, about 20-25 MiB per\n" +
			"worker (-j); lower --jobs under a tight memory limit. --preset NAME records the\n" +
			"presets in the bundle, for load to apply; a DIR that kbundle load installed keeps\n" +
			"the presets of its install record too. kbundle's own files (bundles, a set's\n" +
			"SET.d folder, temporaries, lock files) are left out, each named.",
		Flags: []cli.Flag{dirFlag, outputFlag, levelFlag, jobsFlag, excludeFlag, presetFlag, jsonFlag, quietFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("pack takes no arguments (got %q); use --dir", safe(c.Args().First())), exitUsage)
			}
			dir := c.String("dir")
			if dir == "" {
				return cli.Exit("no cache directory: pass --dir DIR or set KBUNDLE_CACHE_DIR", exitUsage)
			}
			// Recorded in the bundle so that load applies them by default.
			presets, err := preset.ParseList(c.StringSlice("preset")...)
			if err != nil {
				return cli.Exit(err.Error(), exitUsage)
			}
			presets = withInstalledPresets(c, dir, presets)
			start := time.Now()
			res, _, err := packDir(c, dir, c.String("output"), presets, "")
			if err != nil {
				return err
			}
			if missing, _ := preset.MissingContent(os.DirFS(dir), presets); len(missing) > 0 {
				warn(c, "%s holds nothing for preset %s: was it filled by that framework?", safe(dir), preset.Names(missing))
			}
			return reportPack(c, dir, res, time.Since(start))
		},
	})
}

// withInstalledPresets adds, to the presets given, those that dir's
// install record names when dir is a tree kbundle installed (a DEST
// packed to keep what a job compiled into it), saying so: a bundle
// without them would load with no export line, and its job would
// compile into the framework's default cache (issue 25, U7).
func withInstalledPresets(c *cli.Context, dir string, given []*preset.Preset) []*preset.Preset {
	rec, err := bundle.ReadInstallRecord(dir)
	if err != nil || len(rec.Presets) == 0 {
		return given
	}
	recorded, _ := preset.ParseList(rec.Presets...) // a name this kbundle does not know is dropped
	var added []*preset.Preset
	for _, p := range recorded {
		if !slices.ContainsFunc(given, func(g *preset.Preset) bool { return g.Name == p.Name }) {
			added = append(added, p)
		}
	}
	if len(added) == 0 {
		return given
	}
	say(c, "%s was installed by kbundle load with preset %s: recorded in the bundle, so that its load exports them too",
		safe(dir), preset.Names(added))
	return append(added, given...)
}

// packDir packs dir to out (default dir/cache.kbundle) with the shared
// flags of c, showing progress.
func packDir(c *cli.Context, dir, out string, presets []*preset.Preset, python string) (*bundle.PackResult, map[string]string, error) {
	lvl, err := level(c)
	if err != nil {
		return nil, nil, err
	}
	n, err := jobs(c)
	if err != nil {
		return nil, nil, err
	}
	if out == "" {
		out = filepath.Join(dir, "cache.kbundle")
	}
	if out == "-" {
		return nil, nil, cli.Exit("a bundle is written to a file, not to stdout: pass -o FILE (./- for a file named -)", exitUsage)
	}
	if d := filepath.Dir(out); !isDir(d) {
		return nil, nil, noOutputDir(out)
	}
	for _, g := range c.StringSlice("exclude") {
		if _, err := path.Match(g, ""); err != nil {
			return nil, nil, cli.Exit(fmt.Sprintf("--exclude %q: %v", g, err), exitUsage)
		}
	}
	var ct time.Time
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, nil, cli.Exit(fmt.Sprintf("SOURCE_DATE_EPOCH=%q is not a number of seconds", s), exitUsage)
		}
		ct = time.Unix(n, 0)
	}
	trust, err := trustPolicy()
	if err != nil {
		return nil, nil, err
	}
	// The versions the presets' caches key on, recorded for load to
	// compare (docs/presets.md, "What a load compares").
	tc, _ := toolchainMeta(presets, python)
	bar := newProgress(c, "packing")
	res, err := bundle.Pack(c.Context, dir, out, &bundle.PackOptions{
		Level: lvl, Jobs: n, Exclude: c.StringSlice("exclude"), Trust: trust,
		Preset: preset.Names(presets), Progress: bar.update, Host: hostinfo.Collect(), Meta: tc, ContentTime: ct,
	})

	bar.done()
	if err != nil {
		return nil, nil, cli.Exit(fmt.Sprintf("cannot pack %s: %v", safe(dir), err), exitError)
	}
	return res, tc, nil
}

// packJSON is `kbundle pack --json`; fields are only ever added.
type packJSON struct {
	bundleJSON
	Skipped  []string `json:"skipped"`
	LeftOut  []string `json:"left_out"`  // kbundle's own files in DIR: bundles, temporaries, lock files
	Copied   []string `json:"copied"`    // symlinks stored as copies of their target
	Writable []string `json:"writable"`  // entries others could have written, with why
	Untrust  string   `json:"untrusted"` // why load would refuse the bundle; "" when it would not
	Seconds  float64  `json:"seconds"`
}

// reportPack prints what pack did: what was skipped and the warnings
// (always), then a summary line on stderr (unless --quiet) or the JSON
// object on stdout.
func reportPack(c *cli.Context, dir string, res *bundle.PackResult, took time.Duration) error {
	packWarnings(c.App.ErrWriter, dir, res)
	if c.Bool("json") {
		// The content digest is the index's: read back from the bundle
		// just written.
		content := ""
		if rc, err := bundle.Open(res.Path, nil); err == nil {
			content = bundle.FormatDigest(rc.ContentDigest())
			rc.Close()
		}
		return writeJSON(c.App.Writer, packJSON{bundleJSON: bundleJSON{jsonHead: okHead(), Path: res.Path, Entries: res.Entries(),
			Files: res.Files, Dirs: res.Dirs, RawBytes: res.RawBytes, DataBytes: res.DataBytes,
			PackedBytes: res.PackedBytes, Ratio: ratio(res.RawBytes, res.PackedBytes), Segments: res.Segments,
			Digest: res.Digest.String(), FileDigest: bundle.FormatDigest(res.Digest), ContentDigest: content},
			Skipped: append([]string{}, res.Skipped...),
			LeftOut: append([]string{}, res.LeftOut...),
			Copied:  append([]string{}, res.Copied...), Writable: append([]string{}, res.Writable...),
			Untrust: errString(res.Untrusted), Seconds: took.Seconds()})
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
func printPackResult(w io.Writer, dir string, res *bundle.PackResult) {
	packWarnings(w, dir, res)
	fmt.Fprintf(w, "kbundle: %s\n", packSummary(res, 0))
}

// listMax is how many skipped, copied or writable entries pack names
// before it only counts the rest.
const listMax = 20

func printList(w io.Writer, format string, items []string) {
	for i, s := range items {
		if i == listMax {
			fmt.Fprintf(w, "kbundle: ... and %d more\n", len(items)-listMax)
			break
		}
		fmt.Fprintf(w, format, safe(s))
	}
}

// packWarnings reports what was skipped or stored as a copy, then what
// would make the bundle useless or unsafe: empty, written from a tree
// others can write, refused by load.
func packWarnings(w io.Writer, dir string, res *bundle.PackResult) {
	printList(w, "kbundle: not packed (not a regular file or directory): %s\n", res.Skipped)
	for i, s := range res.LeftOut {
		if i == listMax {
			fmt.Fprintf(w, "kbundle: ... and %d more of kbundle's own files skipped\n", len(res.LeftOut)-listMax)
			break
		}
		at := max(strings.LastIndex(s, " ("), 0) // "rel (why)"
		fmt.Fprintf(w, "kbundle: skipped %s: %s\n", safe(filepath.Join(dir, s[:at])), safe(strings.TrimSuffix(strings.TrimPrefix(s[at:], " ("), ")")))
	}
	printList(w, "kbundle: symlink stored as a copy of its target: %s\n", res.Copied)
	if len(res.Skipped) > 0 {
		fmt.Fprintf(w, "kbundle: hint: %d entries were not packed (symlinks out of the directory or to directories, devices, sockets, FIFOs): a cache that needs them will miss after a load\n", len(res.Skipped))
	}
	if res.Files == 0 {
		fmt.Fprintf(w, "kbundle: warning: %s holds no files: the bundle is empty, and loading it warms nothing\n", safe(dir))
		fmt.Fprintf(w, "kbundle: hint: check --dir, and that the warm-up's framework wrote its cache there (kbundle warm --preset NAME)\n")
	}
	if len(res.Writable) > 0 {
		fmt.Fprintf(w, "kbundle: warning: %d entries of %s could be written by someone other than you or root:\n", len(res.Writable), safe(dir))
		printList(w, "kbundle:   %s\n", res.Writable)
		fmt.Fprintf(w, "kbundle: hint: whoever can write the cache chooses the code your jobs run, and the bundle, being yours, will be trusted by load: warm into a directory only you can write (chmod -R go-w %s) and pack again\n", safe(dir))
	}
	if res.Untrusted != nil {
		fmt.Fprintf(w, "kbundle: warning: kbundle load will refuse this bundle (exit 3): %s\n", safe(res.Untrusted.Error()))
		fmt.Fprintf(w, "kbundle: hint: the bundle, and every directory on the way to it, must be yours or root's and not writable by others; to share one with a project group or from a service account, see KBUNDLE_TRUSTED_GROUPS and KBUNDLE_TRUSTED_OWNERS in docs/troubleshooting.md\n")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// noOutputDir is the usage error for an output FILE whose directory does
// not exist.
func noOutputDir(out string) error {
	return cli.Exit(fmt.Sprintf("cannot write the bundle %s: directory %s does not exist\n"+
		"kbundle: hint: create it, or pass -o a file in an existing directory", safe(out), safe(filepath.Dir(out))), exitUsage)
}

// isDir reports whether p is a directory (following symlinks); a path that
// cannot be examined (permission denied) counts as one, for the operation
// itself to report.
func isDir(p string) bool {
	fi, err := os.Stat(p)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR)
	}
	return fi.IsDir()
}
