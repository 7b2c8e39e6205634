package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/bundle"
)

func init() {
	register(&cli.Command{
		Name:      "merge",
		Usage:     "fold a bundle set's layers into one bundle",
		UsageText: "kbundle merge [--json] [--grace D] [PATH]",
		Description: "Writes the set's merged view (later layers win, per cache unit) as one bundle,\n" +
			"identical contents stored once, and renames it over PATH: a job loading\n" +
			"meanwhile sees the old set or the new one. The folded layers stay in PATH.d\n" +
			"for readers of the previous set; a later merge removes them once the base that\n" +
			"folded them is older than --grace. Exit status: 0 merged (or nothing to\n" +
			"merge), 1 error, 2 usage error, 3 the set is unusable.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the result as a JSON object on stdout"},
			&cli.DurationFlag{Name: "grace", Value: bundle.DefaultGrace, Usage: "keep folded layers this long for readers of the previous set"},
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
	res, err := bundle.MergeSet(c.Context, path, &bundle.MergeOptions{
		LayerOptions: bundle.LayerOptions{Trust: trust},
		Open:         &bundle.OpenOptions{Trusted: true, Trust: trust},
		Unit:         bundle.CacheUnit, Grace: c.Duration("grace"),
	})
	if err != nil {
		code, _ := exitFor(err)
		return cli.Exit(err.Error(), code)
	}
	if c.Bool("json") {
		writeMergeJSON(c, path, res)
	}
	if !c.Bool("quiet") {
		if res.Folded == 0 {
			fmt.Fprintf(c.App.ErrWriter, "kbundle: %s has no layer to merge\n", path)
		} else {
			fmt.Fprintf(c.App.ErrWriter, "kbundle: merged %s into %s (%d entries, content %s); folded layers kept %s for running readers\n",
				plural(res.Folded, "layer", "layers"), path, res.Entries, bundle.FormatDigest(res.Content), c.Duration("grace").Round(time.Second))
		}
		if len(res.Removed) > 0 {
			fmt.Fprintf(c.App.ErrWriter, "kbundle: removed %s folded before\n", plural(len(res.Removed), "layer", "layers"))
		}
	}
	return nil
}
