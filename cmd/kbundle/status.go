package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/warmup"
	"github.com/urfave/cli/v2"
)

// statusJSON is `kbundle status --json`; fields are only ever added.
// When a DEST is not a tree kbundle installed, or cannot be read (exit
// 1), ok is false and the failure's fields say so: status reports what
// failed in its own object.
type statusJSON struct {
	jsonHead
	Trees []statusTree `json:"trees"`
}

// Tree states in `kbundle status`.
const (
	stateInstalled   = "installed"    // a record, read: the fields below are filled
	stateMissing     = "missing"      // DEST does not exist: nothing installed
	stateOldMarker   = "old_marker"   // installed by an older kbundle, without a record
	stateNewerRecord = "newer_record" // a record of a version this kbundle does not read
	stateNotKbundle  = "not_kbundle"  // not a tree kbundle installed (or not yours)
	stateUnreadable  = "unreadable"   // the record or the tree could not be read
)

// statusTree is one DEST in `kbundle status --json`.
type statusTree struct {
	Dest  string `json:"dest"`
	State string `json:"state"`
	// Reason says why a tree is not "installed" ("" when it is).
	Reason string `json:"reason,omitempty"`
	// From the install record (state "installed").
	RecordedDest  string        `json:"recorded_dest,omitempty"`
	ContentDigest string        `json:"content_digest,omitempty"`
	Layers        []statusLayer `json:"layers,omitempty"`
	Installed     string        `json:"installed,omitempty"`
	Job           string        `json:"job,omitempty"`
	Host          string        `json:"host,omitempty"`
	Presets       []string      `json:"presets,omitempty"`
	Env           []string      `json:"env,omitempty"`
	Entries       int           `json:"entries"`
	Files         int           `json:"files"`
	Dirs          int           `json:"dirs"`
	Bytes         int64         `json:"bytes"`
	Tree          *statusChange `json:"tree,omitempty"`
	RawBytes      int64         `json:"raw_bytes"` // Bytes, under its canonical name
}

// statusLayer is one bundle of an installed set, as its install record
// names it, with its whole-file digest under the canonical name too.
type statusLayer struct {
	bundle.RecordLayer
	FileDigest string `json:"file_digest"`
}

// statusChange is how the tree differs from its record, counted.
type statusChange struct {
	Unchanged bool `json:"unchanged"`
	New       int  `json:"new"`
	Changed   int  `json:"changed"`
	Missing   int  `json:"missing"`
}

func init() {
	register(&cli.Command{
		Name:      "status",
		Usage:     "show what kbundle installed on this node, and whether it changed since",
		UsageText: "kbundle status [--json] [DEST...]",
		Description: "Reads each DEST's install record (" + bundle.InstalledMarker + "): the set and its layers, when and by\n" +
			"which job it was installed, the presets and their exports, the size, and whether the tree still\n" +
			"matches what was installed (new, changed and missing entries, counted).\n" +
			"Without DEST it shows every tree of yours named like the default DEST ($TMPDIR/kbundle-$USER-*).\n" +
			"Under a launcher of several tasks (the MPI build) it is collective: the lowest rank of each node reads\n" +
			"that node's trees, and rank 0 prints one line a node and tree, identical nodes merged (kbn[1-3]).\n" +
			"Exit 0 when it could read what it was asked, nothing installed included; 1 when a DEST is not a\n" +
			"tree kbundle installed, or its record or tree could not be read.",
		Flags: []cli.Flag{jsonFlag,
			&cli.GenericFlag{Name: "timeout", Value: &timeoutValue{loadcmd.DefaultTimeout}, EnvVars: []string{"KBUNDLE_TIMEOUT"},
				Usage: "under a launcher: end the status (MPI_Abort) if it has not finished by then, `D`: seconds, or with a unit (30s, 10m)"}},
		Action: statusAction,
	})
}

func statusAction(c *cli.Context) error {
	dests := c.Args().Slice()
	if det, err := detect.FromEnviron(); err == nil && det.MPI && det.Size > 1 {
		return statusNodes(c, det, dests)
	}
	scanned := len(dests) == 0
	out := statusJSON{jsonHead: okHead()}
	out.Trees, _ = collectStatus(dests)
	var failed []string // what went wrong, as stderr says it (below)
	for _, t := range out.Trees {
		if t.State == stateNotKbundle || t.State == stateUnreadable {
			failed = append(failed, fmt.Sprintf("%s: %s", safe(t.Dest), safe(t.Reason)))
		}
	}
	if len(failed) > 0 {
		out.jsonHead = failedHead(exitError, strings.Join(failed, "\nkbundle: "), nil)
	}
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, out); err != nil {
			return err
		}
	} else {
		for i := range out.Trees {
			if i > 0 {
				fmt.Fprintln(c.App.Writer)
			}
			printStatus(c.App.Writer, &out.Trees[i])
		}
	}
	if scanned && len(out.Trees) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "kbundle: nothing installed: no tree of yours named %s*\n", safe(minePrefix(loadcmd.UserName())))
	}
	for _, f := range failed {
		fmt.Fprintf(c.App.ErrWriter, "kbundle: %s\n", f)
	}
	if len(failed) > 0 {
		return cli.Exit("", exitError)
	}
	return nil
}

// collectStatus is the status of each DEST, or without DEST of every
// tree of yours named like the default DEST (directories kbundle did not
// install are left out then), and how many are not kbundle's or could
// not be read.
func collectStatus(dests []string) ([]statusTree, int64) {
	scanned := len(dests) == 0
	if scanned {
		var err error
		if dests, err = mineTrees(loadcmd.UserName(), os.Geteuid()); err != nil {
			return []statusTree{{Dest: minePrefix(loadcmd.UserName()) + "*", State: stateUnreadable, Reason: err.Error()}}, 1
		}
	}
	trees := []statusTree{}
	var bad int64
	for _, d := range dests {
		t := treeStatus(d)
		if t.State == stateNotKbundle || t.State == stateUnreadable {
			if scanned && t.State == stateNotKbundle {
				continue // a directory of yours named so, that kbundle did not install
			}
			bad++
		}
		trees = append(trees, t)
	}
	return trees, bad
}

// treeStatus reads what is installed at dest.
func treeStatus(dest string) statusTree {
	t := statusTree{Dest: dest}
	if abs, err := filepath.Abs(dest); err == nil {
		dest = abs
	}
	fi, err := os.Lstat(dest)
	switch {
	case errors.Is(err, os.ErrNotExist):
		t.State, t.Reason = stateMissing, "nothing installed (it does not exist)"
		return t
	case err != nil:
		t.State, t.Reason = stateUnreadable, err.Error()
		return t
	case fi.Mode()&os.ModeSymlink != 0:
		t.State, t.Reason = stateNotKbundle, "it is a symlink, which kbundle does not follow; give the directory it points to"
		return t
	case !fi.IsDir():
		t.State, t.Reason = stateNotKbundle, "it is not a directory"
		return t
	}
	rec, err := bundle.ReadInstallRecord(dest)
	switch {
	case errors.Is(err, bundle.ErrOldMarker):
		t.State, t.Reason = stateOldMarker, "installed by an older kbundle, which wrote no record of the tree"
		return t
	case errors.Is(err, bundle.ErrNoRecord):
		var e *bundle.Error
		t.State, t.Reason = stateNotKbundle, err.Error()
		if errors.As(err, &e) {
			t.Reason = "not a tree kbundle installed: " + e.Msg
		}
		return t
	case errors.Is(err, bundle.ErrVersion):
		t.State, t.Reason = stateNewerRecord, "installed by a newer kbundle: "+err.Error()
		return t
	case err != nil:
		t.State, t.Reason = stateUnreadable, "cannot read its install record: "+err.Error()
		return t
	}
	t.State = stateInstalled
	if rec.Dest != dest {
		t.RecordedDest = rec.Dest
	}
	t.ContentDigest = rec.ContentDigest
	for _, l := range rec.Layers {
		t.Layers = append(t.Layers, statusLayer{RecordLayer: l, FileDigest: l.Digest})
	}
	t.Installed, t.Job, t.Host, t.Presets = rec.Installed, rec.Job, rec.Host, rec.Presets
	for i := range rec.Entries {
		if rec.Entries[i].Kind == bundle.KindDir {
			t.Dirs++
		} else {
			t.Files++
			t.Bytes += rec.Entries[i].Size
		}
	}
	t.Entries, t.RawBytes = t.Files+t.Dirs, t.Bytes
	var presets []*warmup.Preset
	for _, n := range rec.Presets {
		if p, err := warmup.Lookup(n); err == nil {
			presets = append(presets, p)
		}
	}
	if len(presets) == len(rec.Presets) {
		t.Env, _ = warmup.EnvFor(dest, presets...)
	}
	ch, err := bundle.CompareTree(dest, rec)
	if err != nil {
		t.State, t.Reason = stateUnreadable, err.Error()
		return t
	}
	t.Tree = &statusChange{Unchanged: ch.Same(), New: len(ch.New), Changed: len(ch.Changed), Missing: len(ch.Missing)}
	return t
}

// printStatus prints one tree's status for people.
func printStatus(w io.Writer, t *statusTree) {
	if t.State != stateInstalled {
		fmt.Fprintf(w, "%s: %s\n", safe(t.Dest), safe(t.Reason))
		return
	}
	when := t.Installed
	if t.Job != "" {
		when += " by job " + t.Job
	}
	if t.Host != "" {
		when += " on " + t.Host
	}
	fmt.Fprintf(w, "%s: installed %s\n", safe(t.Dest), safe(when))
	if t.RecordedDest != "" {
		fmt.Fprintf(w, "  moved:     installed at %s: the paths relocation wrote name that place\n", safe(t.RecordedDest))
	}
	fmt.Fprintf(w, "  set:       %s (content digest; %s)\n", t.ContentDigest, plural(len(t.Layers), "layer", "layers"))
	for i, l := range t.Layers {
		fmt.Fprintf(w, "  layer %d:   %s\n", i, safe(l.Path))
		fmt.Fprintf(w, "             digest %s, content %s, %s\n", l.Digest, l.ContentDigest, plural(l.Entries, "entry", "entries"))
	}
	presets := "none"
	if len(t.Presets) > 0 {
		presets = strings.Join(t.Presets, ", ")
	}
	fmt.Fprintf(w, "  presets:   %s\n", safe(presets))
	for _, line := range warmup.Exports(t.Env) {
		fmt.Fprintf(w, "    %s\n", safe(line))
	}
	fmt.Fprintf(w, "  size:      %s (%s, %s), %s\n", plural(t.Entries, "entry", "entries"), plural(t.Files, "file", "files"),
		plural(t.Dirs, "directory", "directories"), human(t.Bytes))
	if t.Tree.Unchanged {
		fmt.Fprintf(w, "  tree:      unchanged since install\n")
	} else {
		fmt.Fprintf(w, "  tree:      changed since install: %d new, %d changed, %d missing\n", t.Tree.New, t.Tree.Changed, t.Tree.Missing)
	}
}
