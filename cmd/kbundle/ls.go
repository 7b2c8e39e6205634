package main

import (
	"fmt"
	"io"
	"path"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/preset"
	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "ls",
		Usage:     "list a bundle's entries",
		UsageText: "kbundle ls [FILE [PATTERN...]] [-l [-h]] [--preset NAME]... [--json]",
		Description: "Prints one name a line, directories with a trailing /. A name holding control\n" +
			"characters, a newline or invalid UTF-8 is printed Go-quoted (\"a\\nb\").\n" +
			"A PATTERN selects a name, what is under it (numba/ or numba), or the names it\n" +
			"matches (path.Match: '*/k.ptx'); --preset NAME selects what that framework's\n" +
			"preset keeps in its subdirectory. With -l, a total goes to stderr (not with -q).\n" +
			"--json prints the entries selected, each with its mode, size, mtime and digest.",
		// -h is --human-readable here, as in ls(1) (flagsFirst rewrites it):
		// help is --help alone.
		HideHelp: true,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "long", Aliases: []string{"l"}, Usage: "show mode, size, mtime and digest"},
			&cli.BoolFlag{Name: "human-readable", Usage: "with -l (-lh): sizes in KiB, MiB, GiB and times to the second (-h)"},
			&cli.StringSliceFlag{Name: "preset", Aliases: []string{"p"}, Usage: "only the entries of framework `NAME`'s preset (repeatable)"},
			quietFlag, jsonFlag,
			&cli.BoolFlag{Name: "help", Usage: "show help"},
		},
		Action: lsAction,
	})
}

// lsHuman rewrites ls's -h (and -lh, -hl) to --human-readable: -h is
// help everywhere else.
func lsHuman(a string) []string {
	switch a {
	case "-h":
		return []string{"--human-readable"}
	case "-lh", "-hl":
		return []string{"-l", "--human-readable"}
	}
	return []string{a}
}

// lsFilter selects entries by PATTERN and preset subdirectory.
type lsFilter struct {
	patterns []string
	subdirs  []string
}

// under reports whether name is dir or inside it.
func under(name, dir string) bool {
	dir = strings.TrimSuffix(dir, "/")
	return name == dir || strings.HasPrefix(name, dir+"/")
}

func (f *lsFilter) match(name string) bool {
	if len(f.subdirs) > 0 && !anyOf(f.subdirs, func(d string) bool { return under(name, d) }) {
		return false
	}
	return len(f.patterns) == 0 || anyOf(f.patterns, func(p string) bool {
		ok, _ := path.Match(p, name)
		return ok || under(name, p)
	})
}

func anyOf(xs []string, f func(string) bool) bool {
	for _, x := range xs {
		if f(x) {
			return true
		}
	}
	return false
}

// presetSubdirs are the subdirectories of the presets named in values,
// and of the presets each includes (inductor's includes triton's).
func presetSubdirs(values []string) ([]string, error) {
	ps, err := preset.ParseList(values...)
	if err != nil {
		return nil, err
	}
	var out []string
	for len(ps) > 0 {
		p := ps[0]
		ps = ps[1:]
		out = append(out, p.Subdir)
		for _, n := range p.Includes {
			q, err := preset.Lookup(n)
			if err != nil {
				return nil, err
			}
			ps = append(ps, q)
		}
	}
	return out, nil
}

// lsJSON is `kbundle ls --json`; fields are only ever added. The counts
// and List are of the entries selected; the digests are the bundle's.
type lsJSON struct {
	jsonHead
	Path          string      `json:"path"`
	FileDigest    string      `json:"file_digest"`
	ContentDigest string      `json:"content_digest"`
	Entries       int         `json:"entries"`
	Files         int         `json:"files"`
	Dirs          int         `json:"dirs"`
	RawBytes      int64       `json:"raw_bytes"`
	List          []entryJSON `json:"list"`
}

// entryJSON is one entry of a bundle, as the install record writes one:
// Kind "dir" or "file", Mode its permission bits, MTime RFC 3339 UTC with
// nanoseconds, Digest its content's ("xxh3-128:...", "" for a directory).
type entryJSON struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size"`
	MTime  string `json:"mtime"`
	Digest string `json:"digest"`
}

// entryOf is e's record.
func entryOf(e bundle.Entry) entryJSON {
	ej := entryJSON{Name: e.Name, Kind: bundle.KindFile, Mode: uint32(e.Mode.Perm()), Size: e.Size,
		MTime: e.ModTime.UTC().Format(time.RFC3339Nano)}
	if e.Dir {
		ej.Kind = bundle.KindDir
	} else {
		ej.Digest = bundle.FormatDigest(e.Digest)
	}
	return ej
}

// newLSFilter is the filter of ls's arguments after the bundle: name
// patterns, and the --preset subdirectories.
func newLSFilter(c *cli.Context) (*lsFilter, error) {
	filter := &lsFilter{patterns: c.Args().Tail()}
	for _, p := range filter.patterns {
		if _, err := path.Match(p, ""); err != nil {
			return nil, cli.Exit(fmt.Sprintf("pattern %q: %v", safe(p), err), exitUsage)
		}
	}
	var err error
	if filter.subdirs, err = presetSubdirs(c.StringSlice("preset")); err != nil {
		return nil, cli.Exit(err.Error(), exitUsage)
	}
	return filter, nil
}

// longLine writes ls --long's line of e, shown as name, to tw: mode,
// size, modification time and digest (inUnits: sizes in units, times to
// the second).
func longLine(tw io.Writer, e bundle.Entry, name string, inUnits bool) {
	dig := e.Digest.String()
	if e.Dir {
		dig = "-"
	}
	sz, mt := fmt.Sprint(e.Size), e.ModTime.UTC().Format(time.RFC3339Nano)
	if inUnits {
		sz, mt = human(e.Size), e.ModTime.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(tw, "%v\t%s\t %s\t %s\t %s\n", e.Info().Mode(), sz, mt, dig, name)
}

func lsAction(c *cli.Context) error {
	names, err := bundleArgs(c, c.Args().Slice())
	if err != nil {
		return err
	}
	name := names[0]
	filter, err := newLSFilter(c)
	if err != nil {
		return err
	}
	trust, err := trustPolicy()
	if err != nil {
		return err
	}
	rc, err := openBundle(c, name, &bundle.OpenOptions{Trust: trust})
	if err != nil {
		return err
	}
	defer rc.Close()
	// A set's base with layers: its merged view, as load installs it.
	entries, content, layers := mergedView(name, trust, rc.Entries(), rc.ContentDigest())
	if layers > 0 && !c.Bool("quiet") && !c.Bool("json") {
		fmt.Fprintf(c.App.ErrWriter, "kbundle: %s: the set's merged view, the base and %s\n", safe(name), plural(layers, "layer", "layers"))
	}
	w := c.App.Writer
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', tabwriter.AlignRight)
	long, hum, asJSON := c.Bool("long"), c.Bool("human-readable"), c.Bool("json")
	out := lsJSON{jsonHead: okHead(), Path: name, FileDigest: bundle.FormatDigest(rc.FileDigest()),
		ContentDigest: bundle.FormatDigest(content), List: []entryJSON{}}
	var files, dirs int
	var size int64
	for _, e := range entries {
		if !filter.match(e.Name) {
			continue
		}
		name := safe(e.Name)
		if e.Dir {
			name += "/"
			dirs++
		} else {
			files++
			size += e.Size
		}
		if asJSON {
			out.List = append(out.List, entryOf(e))
			continue
		}
		if !long {
			fmt.Fprintln(w, name)
			continue
		}
		longLine(tw, e, name, hum)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if files+dirs == 0 && (len(filter.patterns) > 0 || len(filter.subdirs) > 0) {
		return cli.Exit(fmt.Sprintf("no entry of %s matches\nkbundle: hint: names are relative to the cache directory (numba/, triton/*/k.json); kbundle ls %s lists them all",
			safe(name), safe(name)), exitError)
	}
	if asJSON {
		out.Entries, out.Files, out.Dirs, out.RawBytes = files+dirs, files, dirs, size
		if err := writeJSON(w, out); err != nil {
			return err
		}
	}
	if long {
		say(c, "total: %s and %s, %s", plural(files, "file", "files"), plural(dirs, "directory", "directories"), human(size))
	}
	return nil
}
