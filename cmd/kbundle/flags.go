package main

import (
	"fmt"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/urfave/cli/v2"
)

// Flags shared by several commands. A flag's placeholder is the
// back-quoted word of its usage.
var (
	levelFlag = &cli.StringFlag{Name: "level", Value: "default", EnvVars: []string{"KBUNDLE_LEVEL"},
		Usage: "compression level `NAME`: " + bundle.LevelNames}
	jobsFlag = &cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, EnvVars: []string{"KBUNDLE_JOBS"},
		Usage: fmt.Sprintf("use `N` parallel workers (0: all cores; at most 4 per core are used; 0..%d)", bundle.MaxJobs)}
	excludeFlag = &cli.StringSliceFlag{Name: "exclude", Usage: "skip paths matching `GLOB` (relative path or base name; repeatable)"}
	outputFlag  = &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the bundle to `FILE` (default: DIR/cache.kbundle)"}
	dirFlag     = &cli.StringFlag{Name: "dir", EnvVars: []string{"KBUNDLE_CACHE_DIR"}, Usage: "the cache directory `DIR`"}
	presetFlag  = &cli.StringSliceFlag{Name: "preset", Aliases: []string{"p"}, EnvVars: []string{"KBUNDLE_PRESET"},
		Usage: "framework `NAME` (repeatable, or space/comma separated; see `kbundle presets`)"}
	quietFlag          = &cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only warnings and errors"}
	jsonFlag           = &cli.BoolFlag{Name: "json", Usage: "print one JSON object on stdout (fields are only ever added)"}
	replacePresetsFlag = &cli.BoolFlag{Name: "replace-presets", Usage: "apply only --preset's presets, not the bundle's recorded ones (none with --preset '')"}
	parentsFlag        = &cli.BoolFlag{Name: "parents", Usage: "create DEST's missing parent directories (without it a missing one is refused, exit 2)"}
	forceFlag          = &cli.BoolFlag{Name: "force", Usage: "replace a non-empty DEST that kbundle installed (it holds .kbundle-installed): everything in it is deleted"}
)

// jobs returns --jobs, refusing a negative count as a usage error.
func jobs(c *cli.Context) (int, error) {
	n := c.Int("jobs")
	if n < 0 || n > bundle.MaxJobs {
		return 0, cli.Exit(fmt.Sprintf("--jobs (or KBUNDLE_JOBS) %d: must be 0 (all cores) to %d", n, bundle.MaxJobs), exitUsage)
	}
	return n, nil
}

// level returns the parsed --level, a bad name being a usage error.
func level(c *cli.Context) (bundle.Level, error) {
	l, err := bundle.ParseLevel(c.String("level"))
	if err != nil {
		return 0, cli.Exit(err.Error(), exitUsage)
	}
	return l, nil
}

// args checks that the command got exactly len(names) arguments and
// returns them; otherwise a usage error showing the command's usage line.
func args(c *cli.Context, names ...string) ([]string, error) {
	if c.NArg() != len(names) {
		return nil, cli.Exit("usage: "+c.Command.UsageText, exitUsage)
	}
	return c.Args().Slice(), nil
}

// timeoutValue is a --timeout: seconds, or a duration with its unit
// (loadcmd.ParseTimeout).
type timeoutValue struct{ d time.Duration }

func (v *timeoutValue) Set(s string) error {
	d, err := loadcmd.ParseTimeout(s)
	if err != nil {
		return err
	}
	v.d = d
	return nil
}

func (v *timeoutValue) String() string {
	if v == nil {
		return ""
	}
	return v.d.String()
}

// timeout returns --timeout's value.
func timeout(c *cli.Context) time.Duration {
	if v, ok := c.Generic("timeout").(*timeoutValue); ok {
		return v.d
	}
	return 0
}
