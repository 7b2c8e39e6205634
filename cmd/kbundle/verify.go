package main

import (
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

// verifyJSON is `kbundle verify --json` when the bundle is intact (else
// the error object); fields are only ever added. Digest is the whole
// file's in bare hex, as it always was; FileDigest the canonical form.
type verifyJSON struct {
	jsonHead
	Path          string  `json:"path"`
	Deep          bool    `json:"deep"`
	Entries       int     `json:"entries"`
	RawBytes      int64   `json:"raw_bytes"`
	DataBytes     int64   `json:"data_bytes"`
	Digest        string  `json:"digest"`
	Seconds       float64 `json:"seconds"`
	FileDigest    string  `json:"file_digest"`
	ContentDigest string  `json:"content_digest"`
}

func init() {
	register(&cli.Command{
		Name:      "verify",
		Usage:     "check a bundle's whole-file digest (with --deep, every entry's content digest too)",
		UsageText: "kbundle verify FILE [--deep] [--jobs N] [--json] [-q]",
		Flags: []cli.Flag{jobsFlag, jsonFlag, quietFlag,
			&cli.BoolFlag{Name: "deep", Usage: "also decompress every segment and check every entry's content digest"}},
		Action: verifyAction,
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
	err = rc.Verify(c.Context, &bundle.VerifyOptions{Deep: c.Bool("deep"), Jobs: n, Progress: bar.update})
	bar.done()
	if err != nil {
		return exit(err)
	}
	took := time.Since(start)
	name := c.Args().First()
	if c.Bool("json") {
		return writeJSON(c.App.Writer, verifyJSON{jsonHead: okHead(), Path: name, Deep: c.Bool("deep"), Entries: len(rc.Entries()),
			RawBytes: rc.RawSize(), DataBytes: rc.DataSize(), Digest: rc.FileDigest().String(), Seconds: took.Seconds(),
			FileDigest: bundle.FormatDigest(rc.FileDigest()), ContentDigest: bundle.FormatDigest(rc.ContentDigest())})
	}
	what := "whole-file digest"
	if c.Bool("deep") {
		what = "every entry"
	}
	say(c, "%s: ok (%s), %s, %s, xxh3-128:%s, in %s", safe(name), what, plural(len(rc.Entries()), "entry", "entries"),
		human(rc.RawSize()), rc.FileDigest(), elapsed(took))
	return nil
}
