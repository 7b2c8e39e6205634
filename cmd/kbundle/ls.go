package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/bundle"
)

func init() {
	register(&cli.Command{
		Name:      "ls",
		Usage:     "list a bundle's entries",
		UsageText: "kbundle ls FILE [-l]",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "long", Aliases: []string{"l"}, Usage: "show mode, size, mtime and digest"}},
		Action: func(c *cli.Context) error {
			rc, err := openArg(c, "kbundle ls FILE [-l]")
			if err != nil {
				return err
			}
			defer rc.Close()
			tw := tabwriter.NewWriter(os.Stdout, 0, 8, 1, ' ', tabwriter.AlignRight)
			for _, e := range rc.Entries() {
				if !c.Bool("long") {
					fmt.Fprintln(os.Stdout, bundle.Printable(e.Name))
					continue
				}
				dig := e.Digest.String()
				if e.Dir {
					dig = "-"
				}
				fmt.Fprintf(tw, "%v\t%d\t %s\t %s\t %s\n", e.Info().Mode(), e.Size,
					e.ModTime.UTC().Format(time.RFC3339Nano), dig, bundle.Printable(e.Name))
			}
			return tw.Flush()
		},
	})
}
