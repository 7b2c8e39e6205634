package main

import (
	"fmt"
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
	// Bundles are, when more than one was checked, every one, this one
	// first: each FILE given and its set's layers.
	Bundles []verifyJSON `json:"bundles,omitempty"`
}

func init() {
	register(&cli.Command{
		Name:      "verify",
		Usage:     "check a bundle's whole-file digest (with --deep, every entry's content digest too)",
		UsageText: "kbundle verify [FILE...] [--deep] [--jobs N] [--json] [-q]",
		Description: "Checks each FILE (a bundle or a set's base, default $KBUNDLE_BUNDLE, else\n" +
			"$KBUNDLE_CACHE_DIR/cache.kbundle) and the layers of its set above the base, as load reads them.\n" +
			"One line each; any failure makes the exit status the first failure's.",
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
	names, err := bundleArgs(c, c.Args().Slice())
	if err != nil {
		return err
	}
	trust, err := trustPolicy()
	if err != nil {
		return err
	}
	// Each FILE with its set's layers above the base: what load reads.
	var paths []string
	for _, name := range names {
		ms, lerr := bundle.SetMembers(name)
		if lerr != nil || len(ms) == 0 {
			paths = append(paths, name) // the open says why
			continue
		}
		for _, m := range ms {
			paths = append(paths, m.Path)
		}
	}
	var all []verifyJSON
	var failed []error
	for _, p := range paths {
		v, err := verifyOne(c, p, n, trust)
		if err != nil {
			if len(paths) == 1 {
				return err
			}
			failed = append(failed, err)
			fmt.Fprintf(c.App.ErrWriter, "kbundle: %s\n", err)
			continue
		}
		all = append(all, v)
	}
	if len(failed) > 0 {
		code := exitError
		if ec, ok := failed[0].(cli.ExitCoder); ok {
			code = ec.ExitCode()
		}
		return cli.Exit(fmt.Sprintf("%d of %d bundles failed the check (above)", len(failed), len(paths)), code)
	}
	if c.Bool("json") {
		out := all[0]
		if len(all) > 1 {
			out.Bundles = all
		}
		return writeJSON(c.App.Writer, out)
	}
	return nil
}

// verifyOne checks the bundle at name and says so (unless --json).
func verifyOne(c *cli.Context, name string, n int, trust *bundle.TrustPolicy) (verifyJSON, error) {
	rc, err := openBundle(c, name, &bundle.OpenOptions{Trust: trust})
	if err != nil {
		return verifyJSON{}, err
	}
	defer rc.Close()
	start := time.Now()
	bar := newProgress(c, "verifying")
	err = rc.Verify(c.Context, &bundle.VerifyOptions{Deep: c.Bool("deep"), Jobs: n, Progress: bar.update})
	bar.done()
	if err != nil {
		return verifyJSON{}, exit(err)
	}
	took := time.Since(start)
	v := verifyJSON{jsonHead: okHead(), Path: name, Deep: c.Bool("deep"), Entries: len(rc.Entries()),
		RawBytes: rc.RawSize(), DataBytes: rc.DataSize(), Digest: rc.FileDigest().String(), Seconds: took.Seconds(),
		FileDigest: bundle.FormatDigest(rc.FileDigest()), ContentDigest: bundle.FormatDigest(rc.ContentDigest())}
	if !c.Bool("json") {
		what := "whole-file digest"
		if c.Bool("deep") {
			what = "every entry"
		}
		say(c, "%s: ok (%s), %s, %s, xxh3-128:%s, in %s", safe(name), what, plural(len(rc.Entries()), "entry", "entries"),
			human(rc.RawSize()), rc.FileDigest(), elapsed(took))
	}
	return v, nil
}
