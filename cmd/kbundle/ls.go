package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "ls",
		Usage:     "list a bundle's entries",
		UsageText: "kbundle ls FILE [-l]",
		Description: "Prints one name a line, directories with a trailing /. A name holding control\n" +
			"characters, a newline or invalid UTF-8 is printed Go-quoted (\"a\\nb\").",
		Flags:  []cli.Flag{&cli.BoolFlag{Name: "long", Aliases: []string{"l"}, Usage: "show mode, size, mtime and digest"}},
		Action: lsAction,
	})
}

func lsAction(c *cli.Context) error {
	rc, err := openArg(c)
	if err != nil {
		return err
	}
	defer rc.Close()
	w := c.App.Writer
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', tabwriter.AlignRight)
	for _, e := range rc.Entries() {
		name := safe(e.Name)
		if e.Dir {
			name += "/"
		}
		if !c.Bool("long") {
			fmt.Fprintln(w, name)
			continue
		}
		dig := e.Digest.String()
		if e.Dir {
			dig = "-"
		}
		fmt.Fprintf(tw, "%v\t%d\t %s\t %s\t %s\n", e.Info().Mode(), e.Size,
			e.ModTime.UTC().Format(time.RFC3339Nano), dig, name)
	}
	return tw.Flush()
}
