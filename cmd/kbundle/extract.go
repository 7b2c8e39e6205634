package main

import (
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

// extractJSON is `kbundle extract --json`; fields are only ever added.
type extractJSON struct {
	Path    string  `json:"path"`
	Dest    string  `json:"dest"`
	Entries int     `json:"entries"`
	Files   int     `json:"files"`
	Dirs    int     `json:"dirs"`
	Bytes   int64   `json:"raw_bytes"`
	Seconds float64 `json:"seconds"`
}

func init() {
	register(&cli.Command{
		Name:      "extract",
		Usage:     "extract a bundle into a directory, atomically",
		UsageText: "kbundle extract FILE DEST [--force] [--jobs N] [--json] [-q]",
		Flags:     []cli.Flag{forceFlag, jobsFlag, jsonFlag, quietFlag},
		Action:    extractAction,
	})
}

func extractAction(c *cli.Context) error {
	a, err := args(c, "FILE", "DEST")
	if err != nil {
		return err
	}
	n, err := jobs(c)
	if err != nil {
		return err
	}
	trust, err := trustPolicy()
	if err != nil {
		return err
	}
	rc, err := openBundle(c, a[0], &bundle.OpenOptions{Trusted: true, Trust: trust})
	if err != nil {
		return err
	}
	defer rc.Close()
	start := time.Now()
	bar := newProgress(c, "extracting")
	res, err := rc.Extract(c.Context, a[1], &bundle.ExtractOptions{Force: c.Bool("force"), Jobs: n, Progress: bar.update, Trust: trust})
	bar.done()
	if err != nil {
		return exit(atDest(err))
	}
	took := time.Since(start)
	if c.Bool("json") {
		return writeJSON(c.App.Writer, extractJSON{Path: a[0], Dest: res.Dest, Entries: res.Files + res.Dirs,
			Files: res.Files, Dirs: res.Dirs, Bytes: res.Bytes, Seconds: took.Seconds()})
	}
	say(c, "extracted %s and %s (%s) to %s in %s", plural(res.Files, "file", "files"),
		plural(res.Dirs, "directory", "directories"), human(res.Bytes), safe(res.Dest), elapsed(took))
	return nil
}
