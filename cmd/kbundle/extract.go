package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/preset"
	"github.com/urfave/cli/v2"
)

// extractJSON is `kbundle extract --json`; fields are only ever added.
// Its digests are the bundle's, and so the tree's as installed.
type extractJSON struct {
	jsonHead
	Path    string   `json:"path"`
	Dest    string   `json:"dest"`
	Entries int      `json:"entries"`
	Files   int      `json:"files"`
	Dirs    int      `json:"dirs"`
	Bytes   int64    `json:"raw_bytes"`
	Seconds float64  `json:"seconds"`
	Presets []string `json:"presets,omitempty"` // the presets applied
	Env     []string `json:"env,omitempty"`     // NAME=VALUE pointing them at DEST
	// FileDigest and ContentDigest are the bundle's.
	FileDigest    string `json:"file_digest"`
	ContentDigest string `json:"content_digest"`
}

func init() {
	register(&cli.Command{
		Name:      "extract",
		Usage:     "extract a bundle into a directory, atomically",
		UsageText: "kbundle extract [FILE] DEST [--force] [--parents] [--preset NAME]... [--replace-presets] [--print-env] [--jobs N] [--json] [-q]",
		Description: "Extracts FILE to DEST as one node of `kbundle load` does: into a private\n" +
			"temporary sibling of DEST, relocated for the presets (the ones recorded in the\n" +
			"bundle, or --preset's), then renamed into place; a failure installs nothing.\n" +
			"Prints the presets' `export VAR=VALUE` lines for DEST on stdout, as load does,\n" +
			"and a summary on stderr; with --print-env, no preset to apply is a usage error.",
		Flags: []cli.Flag{forceFlag, parentsFlag, presetFlag, replacePresetsFlag,
			&cli.BoolFlag{Name: "print-env", Usage: "print only the presets' export lines on stdout (needs a preset)"},
			jobsFlag, jsonFlag, quietFlag},
		Action: extractAction,
	})
}

// extractArgs reads extract's command line: the bundle and DEST (DEST
// alone: the default bundle), the jobs and the named presets.
func extractArgs(c *cli.Context) (a []string, n int, named []*preset.Preset, err error) {
	if c.NArg() < 1 || c.NArg() > 2 {
		return nil, 0, nil, cli.Exit("usage: "+c.Command.UsageText, exitUsage)
	}
	a = c.Args().Slice()
	if len(a) == 1 { // DEST alone: the bundle is the default one
		names, err := bundleArgs(c, nil)
		if err != nil {
			return nil, 0, nil, err
		}
		a = []string{names[0], a[0]}
	}
	n, err = jobs(c)
	if err != nil {
		return nil, 0, nil, err
	}
	if named, err = preset.ParseList(c.StringSlice("preset")...); err != nil {
		return nil, 0, nil, cli.Exit(err.Error(), exitUsage)
	}
	if c.Bool("print-env") && c.Bool("json") {
		return nil, 0, nil, cli.Exit("--print-env and --json do not go together: --json's \"env\" holds the variables", exitUsage)
	}
	return a, n, named, nil
}

func extractAction(c *cli.Context) error {
	a, n, named, err := extractArgs(c)
	if err != nil {
		return err
	}
	trust, err := trustPolicy()
	if err != nil {
		return err
	}
	rc, err := openBundle(c, a[0], &bundle.OpenOptions{Trusted: true, Trust: trust})
	if err != nil {
		return err
	}
	defer rc.Close()
	presets, err := preset.Choose(named, c.Bool("replace-presets"), rc.Meta())
	if err != nil {
		// A preset of a newer kbundle: its relocation cannot be done.
		return cli.Exit(fmt.Sprintf("%s: %s\nkbundle: hint: upgrade kbundle, or name the presets with --preset and --replace-presets",
			safe(a[0]), safe(err.Error())), exitUnusable)
	}
	if c.Bool("print-env") && len(presets) == 0 {
		return cli.Exit("--print-env: the bundle records no preset; pass --preset NAME", exitUsage)
	}
	if len(named) > 0 {
		if missing, _ := preset.MissingContent(rc.Reader, named); len(missing) > 0 {
			warn(c, "the bundle has nothing for preset %s: its variables point at an empty directory", strings.ReplaceAll(preset.Names(missing), ",", ", "))
		}
	}
	start := time.Now()
	bar := newProgress(c, "extracting")
	var applied []string
	if len(presets) > 0 {
		applied = strings.Split(preset.Names(presets), ",")
	}
	opt := &bundle.ExtractOptions{Force: c.Bool("force"), Parents: c.Bool("parents"), Jobs: n, Progress: bar.update, Trust: trust,
		Record: bundle.RecordInfo{Host: hostName(), Presets: applied}}
	base := rc.Reader
	// A set's base with layers: the merged view, as load installs it.
	if set, err := bundle.OpenSet(a[0], &bundle.OpenOptions{Trusted: true, Trust: trust}); err == nil {
		defer set.Close()
		if set.HasDeltas() {
			base, opt = set.Read[0].Reader, set.StageOptions(*opt)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		bar.done()
		return exit(err) // a layer that cannot be used: as load refuses it
	}
	st, err := base.Stage(c.Context, a[1], opt)
	bar.done()
	if err != nil {
		return exit(atDest(err))
	}
	env, err := installRelocated(st, rc.Meta()[bundle.MetaOrigin], presets)
	if err != nil {
		return err
	}
	res, took := st.Result(), time.Since(start)
	if c.Bool("json") {
		var names []string
		if len(presets) > 0 {
			names = strings.Split(preset.Names(presets), ",")
		}
		return writeJSON(c.App.Writer, extractJSON{jsonHead: okHead(), Path: a[0], Dest: res.Dest, Entries: res.Files + res.Dirs,
			Files: res.Files, Dirs: res.Dirs, Bytes: res.Bytes, Seconds: took.Seconds(), Presets: names, Env: env,
			FileDigest: bundle.FormatDigest(rc.FileDigest()), ContentDigest: bundle.FormatDigest(rc.ContentDigest())})
	}
	printExports(c.App.Writer, env)
	say(c, "extracted %s and %s (%s) to %s in %s", plural(res.Files, "file", "files"),
		plural(res.Dirs, "directory", "directories"), human(res.Bytes), safe(res.Dest), elapsed(took))
	return nil
}

// installRelocated applies the presets' relocation to the staged tree,
// then installs it and returns the presets' variables for its DEST: a
// failure at any step installs nothing (the staged tree is removed, a
// replaced tree put back).
func installRelocated(st *bundle.Staged, origin string, presets []*preset.Preset) ([]string, error) {
	env, err := preset.EnvFor(st.Dest(), presets...)
	if err == nil {
		err = preset.RelocateStaged(st.Dir(), st.Dest(), origin, presets...)
	}
	if err != nil {
		st.Abort()
		return nil, cli.Exit(fmt.Sprintf("%s; nothing was installed at %s", safe(err.Error()), safe(st.Dest())), exitError)
	}
	if err := st.Install(); err != nil {
		if aerr := st.Abort(); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return nil, exit(atDest(err))
	}
	if err := st.Commit(); err != nil {
		return nil, exit(atDest(err))
	}
	return env, nil
}

// hostName is this node's name for install records ("" when unknown).
func hostName() string {
	h, _ := os.Hostname()
	return h
}
