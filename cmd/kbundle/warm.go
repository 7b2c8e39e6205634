package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/preset"
	"github.com/kbundle/kbundle/warmup"
	"github.com/urfave/cli/v2"
)

// Exit statuses of warm when the command cannot be started, as env(1) and
// the shells use them.
const (
	exitCannotExec = 126
	exitNotFound   = 127
	// exitNotReused: warm --check found that the cache was not reused.
	exitNotReused = 4
)

func init() {
	register(&cli.Command{
		Name:      "warm",
		Usage:     "run an application once, as one plain process, to fill a cache directory",
		UsageText: "kbundle warm [--dir DIR] [--preset NAME]... [--pack [-o FILE] [--level NAME]] [--check] -- CMD [ARGS...]",
		Description: "Runs CMD with the presets' variables pointing its JIT framework at DIR and every\n" +
			"MPI/Slurm/Flux launcher variable removed, then reports what it added to DIR.\n" +
			"CMD's exit status becomes kbundle's (128+N when signal N ended it; 127 not\n" +
			"found, 126 not executable). With --pack, DIR is packed afterwards if CMD succeeded.\n" +
			"With --check, CMD then runs again against a copy of DIR unpacked at another path,\n" +
			"as load places it; status 4 if it wrote anything there (the cache was not reused).",
		Flags: []cli.Flag{dirFlag, presetFlag,
			&cli.BoolFlag{Name: "pack", Usage: "pack DIR into a bundle after a successful run"},
			outputFlag, levelFlag, jobsFlag, excludeFlag,
			&cli.IntFlag{Name: "top", Value: 5, Usage: "show the `N` largest new or changed entries"},
			&cli.BoolFlag{Name: "check", Usage: "then run CMD again against a copy of DIR unpacked elsewhere and fail (status 4) unless it reused the cache"},
		},
		Action: warm,
	})
}

// warmOutput is the bundle --pack will write (-o, else DIR/cache.kbundle),
// absolute, checked before the run: "" without --pack.
func warmOutput(c *cli.Context, dir string) (out string, err error) {
	if c.Bool("pack") {
		if _, err := bundle.ParseLevel(c.String("level")); err != nil {
			return "", cli.Exit(err.Error(), exitUsage)
		}
		out = c.String("output")
		if out == "" {
			out = filepath.Join(dir, "cache.kbundle")
		}
		if out, err = filepath.Abs(out); err != nil {
			return "", cli.Exit(err.Error(), exitUsage)
		}
		if fi, err := os.Stat(filepath.Dir(out)); err != nil || !fi.IsDir() {
			if filepath.Dir(out) != dir { // DIR itself is created below
				return "", noOutputDir(out)
			}
		}
	} else if c.IsSet("output") {
		return "", cli.Exit("-o/--output needs --pack", exitUsage)
	}
	return out, nil
}

// warmEnv prepares DIR for the presets and returns the warm-up child's
// environment (preset.ChildEnv, and KBUNDLE_CACHE_DIR), saying what it
// sets and warning of a network file system or no preset.
func warmEnv(c *cli.Context, dir string, presets []*preset.Preset) ([]string, error) {
	if err := preset.Prepare(dir, presets...); err != nil {
		return nil, cli.Exit(err.Error(), exitError)
	}
	if fs := warmup.NetworkFS(dir); fs != "" {
		warmWarn(c.App.ErrWriter, "%s is on %s, a network file system: filling a cache there is slow, and many writers are what kbundle avoids; prefer node-local storage for the warm-up", dir, fs)
	}
	env, err := preset.ChildEnv(os.Environ(), dir, presets...)
	if err != nil {
		return nil, cli.Exit(err.Error(), exitUsage)
	}
	vars, _ := preset.EnvFor(dir, presets...)
	for _, kv := range vars {
		warmInfo(c.App.ErrWriter, "setting %s", kv)
	}
	// Always tell the command where the cache is: with no preset it is
	// all it gets, and an application may read it itself.
	if abs, err := filepath.Abs(dir); err == nil {
		env = append(slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "KBUNDLE_CACHE_DIR=") }),
			"KBUNDLE_CACHE_DIR="+abs)
		warmInfo(c.App.ErrWriter, "setting KBUNDLE_CACHE_DIR=%s", abs)
	}
	if len(presets) == 0 {
		warmWarn(c.App.ErrWriter, "no --preset: no framework cache variable was set; the command gets only KBUNDLE_CACHE_DIR and must use it itself, or it will run cold (see kbundle presets)")
	}
	return env, nil
}

func warm(c *cli.Context) error {
	argv := c.Args().Slice()
	if len(argv) == 0 {
		return cli.Exit("no command to run: kbundle warm [flags] -- CMD [ARGS...]", exitUsage)
	}
	dir := c.String("dir")
	if dir == "" {
		return cli.Exit("no cache directory: pass --dir DIR or set KBUNDLE_CACHE_DIR", exitUsage)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	presets, err := preset.ParseList(c.StringSlice("preset")...)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	// Check what packing needs before a long run, not after it.
	out, err := warmOutput(c, dir)
	if err != nil {
		return err
	}

	env, err := warmEnv(c, dir, presets)
	if err != nil {
		return err
	}

	var skip []string
	if out != "" {
		skip = append(skip, out)
	}
	res, err := warmup.Run(context.Background(), &warmup.Options{
		Argv: argv, Env: env, Dir: dir, Skip: skip,
		Stdin: os.Stdin, Stdout: c.App.Writer, Stderr: c.App.ErrWriter,
	})
	if err != nil {
		return startExit(err)
	}
	printDelta(c.App.ErrWriter, dir, res, argv, c.Int("top"), presets)

	if res.Failed() {
		return commandExit(res, c.Bool("pack"))
	}
	if res.Delta.Empty() {
		warmWarn(c.App.ErrWriter, "the run added nothing to %s: the framework did not use it (check the preset and that the application does not override the cache variable), or the cache was already warm", dir)
	}
	if c.Bool("pack") {
		pres, tc, err := packDir(c, dir, out, presets, warmPython(argv))
		if err != nil {
			return err
		}
		printPackResult(c.App.ErrWriter, dir, pres)
		if s := toolchainSummary(tc); s != "" {
			warmInfo(c.App.ErrWriter, "recorded the toolchain: %s", s)
		}
	}
	if c.Bool("check") {
		return warmCheck(c, dir, out, argv, presets)
	}
	return nil
}

// warmCheck runs warmup.Check (against the bundle just packed, if any)
// and maps its verdict to kbundle's exit status.
func warmCheck(c *cli.Context, dir, bundlePath string, argv []string, presets []*preset.Preset) error {
	warmInfo(c.App.ErrWriter, "check: running %s again against a copy of %s unpacked at another path", argv[0], dir)
	trust, err := trustPolicy()
	if err != nil {
		return err
	}
	res, err := warmup.Check(c.Context, &warmup.CheckOptions{
		Dir: dir, Bundle: bundlePath, Exclude: c.StringSlice("exclude"), Presets: presets, Trust: trust,
		Argv: argv, Env: os.Environ(), Stdin: os.Stdin, Stdout: c.App.Writer, Stderr: c.App.ErrWriter,
	})
	if res != nil {
		res.Report(c.App.ErrWriter, 10)
	}
	switch {
	case errors.Is(err, warmup.ErrUnpointed):
		return cli.Exit(err.Error()+"\nkbundle: hint: name the cache's framework with --preset, or set its cache variable to "+dir, exitNotReused)
	case errors.Is(err, warmup.ErrNotReused), errors.Is(err, warmup.ErrNothingToCheck):
		return cli.Exit(err.Error(), exitNotReused)
	case err != nil:
		return startExit(err)
	case res.Run.Failed():
		return cli.Exit(fmt.Sprintf("check run exited with status %d", res.Run.ExitCode), res.Run.ExitCode)
	}
	return nil
}

func startExit(err error) error {
	switch {
	case errors.Is(err, warmup.ErrNoCommand):
		return cli.Exit(err.Error(), exitUsage)
	case errors.Is(err, warmup.ErrStart) && (errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist)):
		return cli.Exit(err.Error(), exitNotFound)
	case errors.Is(err, warmup.ErrStart):
		return cli.Exit(err.Error(), exitCannotExec)
	}
	return cli.Exit(err.Error(), exitError)
}

func commandExit(res *warmup.Result, pack bool) error {
	what := fmt.Sprintf("command exited with status %d", res.ExitCode)
	if res.Signal != 0 {
		what = "command killed by signal " + warmup.SignalName(res.Signal)
	}
	if pack {
		what += "; not packing"
	}
	return cli.Exit(what, res.ExitCode)
}

func printDelta(w io.Writer, dir string, res *warmup.Result, argv []string, top int, presets []*preset.Preset) {
	d := res.Delta
	how := fmt.Sprintf("exited with status %d", res.ExitCode)
	if res.Signal != 0 {
		how = "was killed by " + warmup.SignalName(res.Signal)
	}
	fmt.Fprintf(w, "kbundle: %s %s after %s\n", argv[0], how, res.Duration.Round(1e6))
	fmt.Fprintf(w, "kbundle: %s: %d added (%s), %d changed (%s), %d removed (%s); now %d files, %s\n",
		dir, len(d.Added), human(d.AddedBytes), len(d.Changed), human(d.ChangedBytes),
		len(d.Removed), human(d.RemovedBytes), d.TotalFiles, human(d.TotalBytes))
	// Per subdirectory, so a preset that stayed empty shows.
	type sub struct {
		n     int
		bytes int64
	}
	subs := map[string]*sub{}
	var order []string
	for _, p := range presets {
		for _, v := range p.AllVars() {
			if v.Dir {
				name, _, _ := strings.Cut(v.Value, "/")
				if name != "." && subs[name] == nil {
					subs[name] = &sub{}
					order = append(order, name)
				}
			}
		}
	}
	for _, ch := range append(append([]preset.Change{}, d.Added...), d.Changed...) {
		name := warmup.DirOf(ch.Path)
		s := subs[name]
		if s == nil {
			s = &sub{}
			subs[name] = s
			order = append(order, name)
		}
		s.n++
		s.bytes += ch.Size
	}
	if len(order) > 1 || (len(order) == 1 && len(presets) > 0) {
		for _, name := range order {
			fmt.Fprintf(w, "kbundle:   %s/: %d new or changed (%s)\n", name, subs[name].n, human(subs[name].bytes))
		}
	}
	if l := d.Largest(top); len(l) > 0 {
		fmt.Fprintf(w, "kbundle: largest new or changed:\n")
		for _, ch := range l {
			fmt.Fprintf(w, "kbundle:   %9s  %s\n", human(ch.Size), ch.Path)
		}
	}
}

func warmWarn(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "kbundle: warning: "+format+"\n", args...)
}

func warmInfo(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "kbundle: "+format+"\n", args...)
}
