package main

import (
	"fmt"
	"path/filepath"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

// cleanJSON is `kbundle clean --json`; fields are only ever added.
type cleanJSON struct {
	Removed []string `json:"removed"` // the DESTs removed
	Missing []string `json:"missing"` // DESTs that did not exist: nothing to do
	Stale   []string `json:"stale"`   // stale temporaries removed
	Refused []string `json:"refused"` // DESTs left as they were (the reason is on stderr)
}

func init() {
	register(&cli.Command{
		Name:      "clean",
		Usage:     "remove node-local trees that kbundle installed, and the temporaries killed kbundle runs left",
		UsageText: "kbundle clean [--stale DIR]... [--json] [-q] [DEST...]",
		Description: "Removes each DEST only when kbundle installed it: a directory of yours, not a symlink or a mount point,\n" +
			"holding " + bundle.InstalledMarker + " (the rule --force follows). Anything else is refused and left as it is.\n" +
			"A DEST that does not exist is nothing to do. Then, beside each DEST and in each --stale DIR, it removes\n" +
			"the temporaries of your kbundle runs on this host that were killed before they could clean up.\n" +
			"It runs once per task: job scripts run it on every node for the DEST their own load printed.",
		Flags: []cli.Flag{jsonFlag, quietFlag,
			&cli.StringSliceFlag{Name: "stale", Usage: "also remove, in `DIR`, the temporaries killed kbundle runs of yours left (repeatable)"}},
		Action: cleanAction,
	})
}

func cleanAction(c *cli.Context) error {
	dests, stale := c.Args().Slice(), c.StringSlice("stale")
	if len(dests) == 0 && len(stale) == 0 {
		return cli.Exit("usage: kbundle clean [--stale DIR]... [DEST...] (see kbundle clean --help)", exitUsage)
	}
	out := cleanJSON{Removed: []string{}, Missing: []string{}, Stale: []string{}, Refused: []string{}}
	for _, d := range dests {
		removed, err := bundle.RemoveInstalled(d)
		switch {
		case err != nil:
			fmt.Fprintf(c.App.ErrWriter, "kbundle: %v\n", err)
			out.Refused = append(out.Refused, d)
		case removed:
			say(c, "removed %s", safe(d))
			out.Removed = append(out.Removed, d)
		default:
			say(c, "%s: nothing to remove (it does not exist)", safe(d))
			out.Missing = append(out.Missing, d)
		}
		if abs, err := filepath.Abs(d); err == nil {
			stale = append(stale, filepath.Dir(abs))
		}
	}
	seen := map[string]bool{}
	for _, dir := range stale {
		if seen[dir] {
			continue
		}
		seen[dir] = true
		gone, err := bundle.RemoveStale(dir)
		for _, p := range gone {
			say(c, "removed %s, left by a kbundle run that was killed", safe(p))
		}
		out.Stale = append(out.Stale, gone...)
		if err != nil {
			warn(c, "%v", err)
		}
	}
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, out); err != nil {
			return err
		}
	}
	switch len(out.Refused) {
	case 0:
		return nil
	case 1:
		return cli.Exit("", exitError)
	}
	return cli.Exit(fmt.Sprintf("%d of %d destinations were not kbundle's and were left as they were", len(out.Refused), len(dests)), exitError)
}
