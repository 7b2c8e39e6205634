package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/preset"
	"github.com/urfave/cli/v2"
)

// exitDiffer is diff's status with --exit-code when A and B differ: not
// 1, which is every command's "error".
const exitDiffer = 4

func init() {
	register(&cli.Command{
		Name:      "diff",
		Usage:     "compare two bundles, or a bundle and a DEST kbundle installed",
		UsageText: "kbundle diff A B [--json] [--exit-code] [--base-only]",
		Description: "A and B are bundle files or DESTs (a directory read through its install record\n" +
			"and its tree: what a job added to it). A set's base stands for the set's merged\n" +
			"view (the base and its layers, as load installs it; --base-only: the base file\n" +
			"alone), so a DEST fresh from a load of the set has no differences from it.\n" +
			"Lists the entries added (in B, not A),\n" +
			"removed and changed (kind, mode, size or content), grouped by preset\n" +
			"(the preset's subdirectory), with sizes; mtimes do not count, as for the content\n" +
			"digest, and a file that load's relocation rewrote counts as its packed content.\n" +
			"Exit status 0 whether or not they differ; with --exit-code, 4 when they differ.",
		Flags: []cli.Flag{jsonFlag,
			&cli.BoolFlag{Name: "exit-code", Usage: "exit with status 4 when A and B differ"},
			&cli.BoolFlag{Name: "base-only", Usage: "read a set's base file alone, not the set's merged view (base and layers)"}},
		Action: diffAction,
	})
}

// diffEntry is one entry of a side: what the content digest covers.
type diffEntry struct {
	dir    bool
	mode   uint32
	size   int64
	digest string
}

// diffItem is one difference in `kbundle diff --json`; fields are only
// ever added.
type diffItem struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"` // "dir" or "file" (B's for a changed entry)
	Preset string `json:"preset"`
	SizeA  int64  `json:"size_a"` // 0 when added
	SizeB  int64  `json:"size_b"` // 0 when removed
}

// diffJSON is `kbundle diff --json`; fields are only ever added. Sides
// are A and B as records under the canonical names (ContentA and
// ContentB are their content digests under the older ones).
type diffJSON struct {
	jsonHead
	A        string         `json:"a"`
	B        string         `json:"b"`
	ContentA string         `json:"content_digest_a"`
	ContentB string         `json:"content_digest_b"`
	Same     bool           `json:"same"`
	Added    []diffItem     `json:"added"`
	Removed  []diffItem     `json:"removed"`
	Changed  []diffItem     `json:"changed"`
	Sides    []diffSideJSON `json:"sides"`
}

// diffSideJSON is one side of a diff: a bundle (Path, its digests) or a
// DEST (Dest, its install record's content digest), as given.
type diffSideJSON struct {
	Path          string `json:"path,omitempty"`
	Dest          string `json:"dest,omitempty"`
	FileDigest    string `json:"file_digest,omitempty"`
	ContentDigest string `json:"content_digest"`
	// Layers is how many layers above the base a set's side read (its
	// merged view; ContentDigest is then the view's); 0 for a bundle
	// without layers, a DEST, or --base-only.
	Layers int `json:"layers"`
}

func diffAction(c *cli.Context) error {
	a, err := args(c, "A", "B")
	if err != nil {
		return err
	}
	sa, da, err := diffSide(c, a[0])
	if err != nil {
		return err
	}
	sb, db, err := diffSide(c, a[1])
	if err != nil {
		return err
	}
	out := diffJSON{jsonHead: okHead(), A: a[0], B: a[1], ContentA: da.ContentDigest, ContentB: db.ContentDigest,
		Added: []diffItem{}, Removed: []diffItem{}, Changed: []diffItem{}, Sides: []diffSideJSON{da, db}}
	for name, eb := range sb {
		ea, ok := sa[name]
		switch {
		case !ok:
			out.Added = append(out.Added, item(name, nil, &eb))
		case ea != eb:
			out.Changed = append(out.Changed, item(name, &ea, &eb))
		}
	}
	for name, ea := range sa {
		if _, ok := sb[name]; !ok {
			out.Removed = append(out.Removed, item(name, &ea, nil))
		}
	}
	for _, l := range [][]diffItem{out.Added, out.Removed, out.Changed} {
		sort.Slice(l, func(i, j int) bool { return l[i].Name < l[j].Name })
	}
	out.Same = len(out.Added)+len(out.Removed)+len(out.Changed) == 0
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, out); err != nil {
			return err
		}
	} else {
		printDiff(c, &out)
	}
	if !out.Same && c.Bool("exit-code") {
		return cli.Exit("", exitDiffer)
	}
	return nil
}

func item(name string, a, b *diffEntry) diffItem {
	it := diffItem{Name: name, Preset: presetOf(name), Kind: bundle.KindFile}
	if a != nil {
		it.SizeA = a.size
		if a.dir {
			it.Kind = bundle.KindDir
		}
	}
	if b != nil {
		it.SizeB = b.size
		it.Kind = bundle.KindFile
		if b.dir {
			it.Kind = bundle.KindDir
		}
	}
	return it
}

// presetOf is the preset whose subdirectory holds name, or "".
func presetOf(name string) string {
	top, _, _ := strings.Cut(name, "/")
	for _, p := range preset.Presets() {
		if p.Subdir != "" && p.Subdir == top {
			return p.Name
		}
	}
	return ""
}

func printDiff(c *cli.Context, d *diffJSON) {
	type line struct {
		mark string
		it   diffItem
	}
	groups := map[string][]line{}
	for _, x := range []struct {
		mark  string
		items []diffItem
	}{{"+", d.Added}, {"-", d.Removed}, {"~", d.Changed}} {
		for _, it := range x.items {
			groups[it.Preset] = append(groups[it.Preset], line{x.mark, it})
		}
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	w := c.App.Writer
	var sum [3]int64
	for _, g := range names {
		head := "no preset:"
		if g != "" {
			head = "preset " + g + ":"
		}
		fmt.Fprintln(w, head)
		ls := groups[g]
		sort.Slice(ls, func(i, j int) bool { return ls[i].it.Name < ls[j].it.Name })
		for _, l := range ls {
			n := safe(l.it.Name)
			if l.it.Kind == bundle.KindDir {
				n += "/"
			}
			switch l.mark {
			case "+":
				fmt.Fprintf(w, "  + %s (%s)\n", n, human(l.it.SizeB))
				sum[0] += l.it.SizeB
			case "-":
				fmt.Fprintf(w, "  - %s (%s)\n", n, human(l.it.SizeA))
				sum[1] += l.it.SizeA
			default:
				fmt.Fprintf(w, "  ~ %s (%s -> %s)\n", n, human(l.it.SizeA), human(l.it.SizeB))
				sum[2] += l.it.SizeB - l.it.SizeA
			}
		}
	}
	if d.Same {
		say(c, "no differences: content digest %s", d.ContentB)
		return
	}
	say(c, "%d added (%s), %d removed (%s), %d changed (%s)", len(d.Added), human(sum[0]), len(d.Removed), human(sum[1]), len(d.Changed), signedHuman(sum[2]))
}

// signedHuman is n as human writes a size, with its sign: "+13 B",
// "-1.5 KiB" (one size format in every line: U43).
func signedHuman(n int64) string {
	if n < 0 {
		return "-" + human(-n)
	}
	return "+" + human(n)
}

// diffSide reads one side: a bundle's index, or a DEST's tree through its
// install record. It returns the entries and the side's record (a DEST's
// content digest: its record's).
func diffSide(c *cli.Context, name string) (map[string]diffEntry, diffSideJSON, error) {
	if fi, err := os.Lstat(name); err == nil && fi.IsDir() {
		m, d, err := destSide(name)
		return m, diffSideJSON{Dest: name, ContentDigest: d}, err
	}
	trust, err := trustPolicy()
	if err != nil {
		return nil, diffSideJSON{}, err
	}
	rc, err := openBundle(c, name, &bundle.OpenOptions{Trust: trust})
	if err != nil {
		return nil, diffSideJSON{}, err
	}
	defer rc.Close()
	entries, content, layers := rc.Entries(), rc.ContentDigest(), 0
	if !c.Bool("base-only") {
		entries, content, layers = mergedView(name, trust, entries, content)
	}
	m := map[string]diffEntry{}
	for _, e := range entries {
		de := diffEntry{dir: e.Dir, mode: uint32(e.Mode.Perm() &^ 0o022), size: e.Size}
		if !e.Dir {
			de.digest = e.Digest.String()
		}
		m[e.Name] = de
	}
	return m, diffSideJSON{Path: name, FileDigest: bundle.FormatDigest(rc.FileDigest()),
		ContentDigest: bundle.FormatDigest(content), Layers: layers}, nil
}

// destSide reads a DEST: its tree now, each file's digest from the record
// while its size and mtime are the recorded ones (else read), and a file
// relocation rewrote, unchanged since, as its packed content.
func destSide(dest string) (map[string]diffEntry, string, error) {
	rec, err := bundle.ReadInstallRecord(dest)
	if err != nil {
		return nil, "", cli.Exit(fmt.Sprintf("%s: cannot compare it: %v\nkbundle: hint: diff reads a DEST through the install record kbundle wrote there; pack the directory and compare the bundle instead",
			safe(dest), safe(err.Error())), exitError)
	}
	recorded := map[string]*bundle.RecordEntry{}
	for i := range rec.Entries {
		recorded[rec.Entries[i].Name] = &rec.Entries[i]
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return nil, "", exit(err)
	}
	defer root.Close()
	m := map[string]diffEntry{}
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name == "." || name == bundle.InstalledMarker || name == bundle.HarvestedMarker {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := diffEntry{dir: fi.IsDir(), mode: uint32(fi.Mode().Perm())}
		switch {
		case fi.IsDir():
		case !fi.Mode().IsRegular():
			e.digest = "special: " + fi.Mode().Type().String() // never equal to a bundle's entry
		default:
			e.size = fi.Size()
			r := recorded[name]
			dig := ""
			if r != nil && r.Kind == bundle.KindFile && r.Size == e.size && r.ModTime().Equal(fi.ModTime()) {
				dig = r.Dig
			} else {
				dd, err := bundle.PathDigest(dest, path.Clean(name))
				if err != nil {
					return err
				}
				dig = bundle.FormatDigest(dd)
			}
			if r != nil && r.Packed != "" && dig == r.Dig {
				dig = r.Packed // unchanged since relocation: as packed
			}
			e.digest = strings.TrimPrefix(dig, bundle.DigestPrefix)
		}
		m[name] = e
		return nil
	})
	if err != nil {
		return nil, "", exit(atDest(fmt.Errorf("cannot read %s: %w", dest, err)))
	}
	return m, rec.ContentDigest, nil
}

// mergedView is what a command that reads the bundle at name shows (ls,
// diff): for a set's base with layers, the set's merged view, as load
// installs it, and how many layers it has above the base; else entries
// and content, the base's own, with 0.
func mergedView(name string, trust *bundle.TrustPolicy, entries []bundle.Entry, content bundle.Digest) ([]bundle.Entry, bundle.Digest, int) {
	set, err := bundle.OpenSet(name, &bundle.OpenOptions{Trust: trust})
	if err != nil {
		return entries, content, 0
	}
	defer set.Close()
	if !set.HasDeltas() {
		return entries, content, 0
	}
	var view []bundle.Entry
	for _, e := range set.Merged(bundle.CacheUnit) {
		view = append(view, e.Entry)
	}
	return view, set.ContentDigest(bundle.CacheUnit), len(set.Read) - 1
}
