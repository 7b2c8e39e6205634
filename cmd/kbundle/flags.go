package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
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

// maxSizeFlag is --max-size of harvest and merge.
var maxSizeFlag = &cli.GenericFlag{Name: "max-size", Value: &sizeValue{}, EnvVars: []string{"KBUNDLE_MAX_SIZE"},
	Usage: "bound the set's merged view to `SIZE` (bytes, or with K, M, G, T: powers of 1024; 0: no bound): past it, the least recently used cache units go, down to 90 %"}

// sizeValue is a --max-size (parseSize).
type sizeValue struct{ n int64 }

func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	v.n = n
	return nil
}

func (v *sizeValue) String() string {
	if v == nil || v.n == 0 {
		return ""
	}
	return strconv.FormatInt(v.n, 10)
}

// maxSize returns --max-size's value in bytes (0: none).
func maxSize(c *cli.Context) int64 {
	if v, ok := c.Generic("max-size").(*sizeValue); ok {
		return v.n
	}
	return 0
}

var sizeRe = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// parseSize reads a size as a user types it: a number of bytes, or a
// number (a fraction too: 1.5G) followed by K, M, G or T, powers of 1024,
// optionally with iB or B (500M, 500MiB, 500MB are the same); a final B
// alone is bytes. Case does not matter. 0 means no bound.
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if k := len(t) - 1; k >= 0 {
		if i := strings.IndexByte("KMGT", t[k]); i >= 0 {
			mult, t = int64(1)<<(10*(i+1)), t[:k]
		}
	}
	bad := fmt.Errorf("size %q: want bytes, or a number with K, M, G or T (powers of 1024), such as 500M or 20G", s)
	if !sizeRe.MatchString(t) {
		return 0, bad
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 || n > math.MaxInt64/mult {
			return 0, bad
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) >= math.MaxInt64 {
		return 0, bad
	}
	return int64(f * float64(mult)), nil
}
