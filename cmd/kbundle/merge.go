package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
)

func init() {
	register(&cli.Command{
		Name:      "merge",
		Usage:     "fold a bundle set's layers into one bundle; bound its size (--max-size)",
		UsageText: "kbundle merge [--json] [--grace D] [--max-size SIZE] [--dry-run] [PATH]",
		Description: "Writes the set's merged view (later layers win, per cache unit) as one bundle,\n" +
			"identical contents stored once, and renames it over PATH: a job loading\n" +
			"meanwhile sees the old set or the new one. The folded layers stay in PATH.d\n" +
			"for readers of the previous set; a later merge removes them once the base that\n" +
			"folded them is older than --grace. With --max-size, a merged view larger than\n" +
			"SIZE loses its least recently used cache units (whole: a Numba index with its\n" +
			"data files, a Triton hash directory), down to 90 % of SIZE, also when the set\n" +
			"has no layer; last use is what harvest recorded (PATH.d/use-*.json), else when\n" +
			"the unit's bundle was written. --dry-run says what would be folded and dropped\n" +
			"and writes nothing. Exit status: 0 merged (or nothing to merge), 1 error,\n" +
			"2 usage error, 3 the set (or one of its use records) is unusable.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the result as a JSON object on stdout"},
			&cli.DurationFlag{Name: "grace", Value: bundle.DefaultGrace, Usage: "keep folded layers this long for readers of the previous set"},
			maxSizeFlag,
			&cli.BoolFlag{Name: "dry-run", Usage: "say what would be folded and pruned; write and remove nothing"},
			quietFlag,
		},
		Action: mergeAction,
	})
}

func mergeAction(c *cli.Context) error {
	if c.NArg() > 1 {
		return cli.Exit("merge takes one PATH", exitUsage)
	}
	names, err := bundleArgs(c, c.Args().Slice())
	if err != nil {
		return err
	}
	path := names[0]
	trust, err := trustPolicy()
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	dry := c.Bool("dry-run")
	res, err := bundle.MergeSet(c.Context, path, &bundle.MergeOptions{
		LayerOptions: bundle.LayerOptions{Trust: trust},
		Open:         &bundle.OpenOptions{Trusted: true, Trust: trust},
		Unit:         bundle.CacheUnit, Grace: c.Duration("grace"),
		MaxSize: maxSize(c), DryRun: dry,
	})
	if err != nil {
		code, hint := exitFor(err)
		msg := err.Error()
		if errors.Is(err, bundle.ErrUseRecord) {
			hint = "hint: remove the damaged use record (or the surplus ones): their units then count as last used when their bundle was written"
		}
		if hint != "" {
			msg += "\nkbundle: " + hint
		}
		return cli.Exit(msg, code)
	}
	wrote := res.Base // a new base was written
	if c.Bool("json") {
		writeMergeJSON(c, path, res, dry)
	}
	if !c.Bool("quiet") {
		w := c.App.ErrWriter
		switch {
		case dry && res.Folded == 0 && len(res.Dropped) == 0:
			fmt.Fprintf(w, "kbundle: dry run: %s has no layer to merge and nothing to prune; nothing written\n", safe(path))
		case dry:
			fmt.Fprintf(w, "kbundle: dry run: would write %s anew (%s folded, %s); nothing written\n", safe(path), plural(res.Folded, "layer", "layers"), plural(res.Entries, "entry", "entries"))
		case !wrote:
			fmt.Fprintf(w, "kbundle: %s has no layer to merge\n", safe(path))
		case res.Folded == 0:
			fmt.Fprintf(w, "kbundle: pruned %s (%d entries, content %s)\n", safe(path), res.Entries, bundle.FormatDigest(res.Content))
		default:
			fmt.Fprintf(w, "kbundle: merged %s into %s (%d entries, content %s); folded layers kept %s for running readers\n",
				plural(res.Folded, "layer", "layers"), safe(path), res.Entries, bundle.FormatDigest(res.Content), c.Duration("grace").Round(time.Second))
		}
		if res.Prune != nil {
			for _, l := range loadcmd.PruneLines(loadcmd.CLI, res.Prune, dry) {
				fmt.Fprintf(w, "kbundle: %s\n", safe(l))
			}
		}
		for _, sk := range res.UsesSkipped {
			fmt.Fprintf(w, "kbundle: warning: use record %s\n", safe(sk))
		}
		if len(res.Removed) > 0 {
			fmt.Fprintf(w, "kbundle: removed %s folded before\n", plural(len(res.Removed), "layer", "layers"))
		}
		if wrote && !dry && res.Untrusted != nil {
			fmt.Fprintf(w, "kbundle: warning: kbundle load will refuse this set (exit 3): %s\n", safe(res.Untrusted.Error()))
		}
	}
	return nil
}
