package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"
)

// verifyJSON is `kbundle verify --json`, printed only when the bundle is
// intact; fields are only ever added.
type verifyJSON struct {
	Path      string  `json:"path"`
	OK        bool    `json:"ok"`
	Entries   int     `json:"entries"`
	RawBytes  int64   `json:"raw_bytes"`
	DataBytes int64   `json:"data_bytes"`
	Digest    string  `json:"digest"`
	Seconds   float64 `json:"seconds"`
}

func init() {
	register(&cli.Command{
		Name:      "verify",
		Usage:     "check a bundle's whole-file digest and every entry's content digest",
		UsageText: "kbundle verify FILE [--jobs N] [--json] [-q]",
		Flags:     []cli.Flag{jobsFlag, jsonFlag, quietFlag},
		Action:    verifyAction,
	})
}

func verifyAction(c *cli.Context) error {
	n, err := jobs(c)
	if err != nil {
		return err
	}
	rc, err := openArg(c)
	if err != nil {
		return err
	}
	defer rc.Close()
	start := time.Now()
	bar := newProgress(c, "verifying")
	var done atomic.Int64 // VerifyProgress reports increments; the display wants a running total
	err = rc.VerifyProgress(context.Background(), n, func(k int64) {
		bar.update(done.Add(k), rc.DataSize())
	})
	bar.done()
	if err != nil {
		return exit(err)
	}
	took := time.Since(start)
	name := c.Args().First()
	if c.Bool("json") {
		return writeJSON(c.App.Writer, verifyJSON{Path: name, OK: true, Entries: len(rc.Entries()),
			RawBytes: rc.RawSize(), DataBytes: rc.DataSize(), Digest: rc.FileDigest().String(), Seconds: took.Seconds()})
	}
	say(c, "%s: ok, %s, %s, xxh3-128:%s, in %s", safe(name), plural(len(rc.Entries()), "entry", "entries"),
		human(rc.RawSize()), rc.FileDigest(), elapsed(took))
	return nil
}
