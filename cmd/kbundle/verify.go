package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/bundle"
)

func init() {
	register(&cli.Command{
		Name:      "verify",
		Usage:     "check a bundle's whole-file digest (with --deep, every entry's content digest too)",
		UsageText: "kbundle verify FILE [--deep] [--jobs N]",
		Flags: []cli.Flag{jobsFlag,
			&cli.BoolFlag{Name: "deep", Usage: "also decompress every segment and check every entry's content digest"}},
		Action: func(c *cli.Context) error {
			rc, err := openArg(c, "kbundle verify FILE")
			if err != nil {
				return err
			}
			defer rc.Close()
			bar := newProgress("verifying")
			err = rc.Verify(c.Context, &bundle.VerifyOptions{Deep: c.Bool("deep"), Jobs: c.Int("jobs"), Progress: bar.update})
			bar.done()
			if err != nil {
				return bundleExit(err)
			}
			fmt.Fprintf(os.Stderr, "kbundle: %s: ok, %d entries, %s, xxh3-128:%s\n",
				c.Args().First(), len(rc.Entries()), human(rc.RawSize()), rc.FileDigest())
			return nil
		},
	})
}
