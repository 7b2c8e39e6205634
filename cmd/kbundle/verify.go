package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "verify",
		Usage:     "check a bundle's whole-file digest and every entry's content digest",
		UsageText: "kbundle verify FILE [--jobs N]",
		Flags:     []cli.Flag{jobsFlag},
		Action: func(c *cli.Context) error {
			rc, err := openArg(c, "kbundle verify FILE")
			if err != nil {
				return err
			}
			defer rc.Close()
			bar := newProgress("verifying")
			err = rc.VerifyProgress(context.Background(), c.Int("jobs"), func(n int64) {
				bar.update(n, rc.DataSize())
			})
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
