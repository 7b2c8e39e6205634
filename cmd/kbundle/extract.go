package main

import (
	"fmt"
	"os"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "extract",
		Usage:     "extract a bundle into a directory, atomically",
		UsageText: "kbundle extract FILE DEST [--force] [--jobs N]",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "replace DEST if it exists and is not empty"},
			jobsFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return cli.Exit("usage: kbundle extract FILE DEST [--force]", exitUsage)
			}
			rc, err := bundle.Open(c.Args().Get(0), &bundle.OpenOptions{Trusted: true})
			if err != nil {
				return bundleExit(err)
			}
			defer rc.Close()
			bar := newProgress("extracting")
			res, err := rc.Extract(c.Context, c.Args().Get(1), &bundle.ExtractOptions{
				Force: c.Bool("force"), Jobs: c.Int("jobs"), Progress: bar.update})

			bar.done()
			if err != nil {
				return bundleExit(err)
			}
			fmt.Fprintf(os.Stderr, "kbundle: extracted %d files and %d directories (%s) to %s\n",
				res.Files, res.Dirs, human(res.Bytes), res.Dest)
			return nil
		},
	})
}
