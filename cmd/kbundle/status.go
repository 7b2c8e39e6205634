package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/preset"
	"github.com/urfave/cli/v2"
)

// The status of a tree is the front door's (loadcmd.Tree), shared with
// Python's status().
type statusTree = loadcmd.Tree

type statusUse = loadcmd.TreeUse

const (
	stateInstalled  = loadcmd.StateInstalled
	stateNotKbundle = loadcmd.StateNotKbundle
	stateUnreadable = loadcmd.StateUnreadable
)

// collectStatus is loadcmd.Status with this process's environment.
func collectStatus(dests []string) ([]statusTree, int64) { return loadcmd.Status(dests, os.Getenv) }

// statusJSON is `kbundle status --json`; fields are only ever added.
// When a DEST is not a tree kbundle installed, or cannot be read (exit
// 1), ok is false and the failure's fields say so: status reports what
// failed in its own object.
type statusJSON struct {
	jsonHead
	Trees []statusTree `json:"trees"`
}

func init() {
	register(&cli.Command{
		Name:      "status",
		Usage:     "show what kbundle installed on this node, and whether it changed since",
		UsageText: "kbundle status [--json] [DEST...]",
		Description: "Reads each DEST's install record (" + bundle.InstalledMarker + "): the set and its layers, when and by\n" +
			"which job it was installed, the presets and their exports, the size, and whether the tree still\n" +
			"matches what was installed (new, changed and missing entries, counted).\n" +
			"Without DEST it shows every tree of yours named like the default DEST ($TMPDIR/kbundle-$USER-*),\n" +
			"and $KBUNDLE_LOCAL_DIR's.\n" +
			"Under a launcher of several tasks (the MPI build) it is collective: the lowest rank of each node reads\n" +
			"that node's trees, and rank 0 prints one line a node and tree, identical nodes merged (kbn[1-3]).\n" +
			"Exit 0 when it could read what it was asked, nothing installed included; 1 when a DEST is not a\n" +
			"tree kbundle installed, or its record or tree could not be read.",
		Flags: []cli.Flag{jsonFlag,
			&cli.GenericFlag{Name: "timeout", Value: &timeoutValue{loadcmd.DefaultTimeout},
				Usage: "under a launcher: end the status (MPI_Abort) if it has not finished by then, `D`: seconds, or with a unit (30s, 10m) [$KBUNDLE_TIMEOUT]"}},
		Action: statusAction,
	})
}

func statusAction(c *cli.Context) error {
	dests := c.Args().Slice()
	var given *float64
	if c.IsSet("timeout") {
		s := timeout(c).Seconds()
		given = &s
	}
	// As load's and harvest's: the same variable, the same words.
	d, err := loadcmd.ResolveTimeout(given, loadcmd.CLI, os.Getenv)
	if det, derr := detect.FromEnviron(); derr == nil && det.MPI && det.Size > 1 {
		if err != nil {
			return newLoader(c, det).fail(err.Error(), exitUsage)
		}
		return statusNodes(c, det, dests, d)
	}
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
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
	if noSetYet(t) {
		fmt.Fprintf(w, "  set:       none when installed: no set at %s yet (--allow-missing: an empty cache for the job to fill; its harvest writes the set)\n", safe(t.Layers[0].Path))
	} else {
		printLayers(w, t)
	}
	presets := "none"
	if len(t.Presets) > 0 {
		presets = strings.Join(t.Presets, ", ")
	}
	fmt.Fprintf(w, "  presets:   %s\n", safe(presets))
	for _, line := range preset.Exports(t.Env) {
		fmt.Fprintf(w, "    %s\n", safe(line))
	}
	fmt.Fprintf(w, "  size:      %s (%s, %s), %s\n", plural(t.Entries, "entry", "entries"), plural(t.Files, "file", "files"),
		plural(t.Dirs, "directory", "directories"), human(t.Bytes))
	if t.Tree.Unchanged {
		fmt.Fprintf(w, "  tree:      unchanged since install\n")
	} else {
		fmt.Fprintf(w, "  tree:      %s\n", treeChanges(t.Tree))
	}
	if u := t.Used; u != nil {
		fmt.Fprintf(w, "  used:      %s\n", treeUsed(u))
	}
	if h := t.Harvested; h != nil {
		what := "nothing new"
		if h.Layer != "" {
			what = "wrote " + h.Layer
		}
		fmt.Fprintf(w, "  harvested: %s into %s (%s)\n", safe(h.Harvested), safe(h.Set), safe(what))
	} else if !t.Tree.Unchanged {
		fmt.Fprintf(w, "  harvested: not since install (kbundle harvest gives what the job compiled back to its set)\n")
	}
}

// treeUsed is the status's words for when a tree was last used.
func treeUsed(u *statusUse) string {
	units := plural(u.Units, "cache unit", "cache units")
	switch {
	case u.Unknown != "":
		return "unknown (" + safe(u.Unknown) + ")"
	case u.Units == 0:
		return "nothing to use (no cache unit installed)"
	case u.Read == 0:
		return "none of its " + units + " read since install (did the application get the exports? kbundle harvest says why)"
	}
	return fmt.Sprintf("last %s, %d of %s read since install", u.Last, u.Read, units)
}

// printLayers prints the set a tree was installed from, and its bundles.
func printLayers(w io.Writer, t *statusTree) {
	fmt.Fprintf(w, "  set:       %s (content digest; %s)\n", t.ContentDigest, plural(len(t.Layers), "layer", "layers"))
	for i, l := range t.Layers {
		fmt.Fprintf(w, "  layer %d:   %s\n", i, safe(l.Path))
		fmt.Fprintf(w, "             digest %s, content %s, %s\n", l.Digest, l.ContentDigest, plural(l.Entries, "entry", "entries"))
	}
}

// noSetYet reports whether t was installed where no set existed yet
// (load --allow-missing): its one layer is the empty bundle load makes
// then (bundle.EmptySet), not a bundle that ever existed (issue 25, U44).
func noSetYet(t *statusTree) bool {
	if len(t.Layers) != 1 || t.Layers[0].Entries != 0 {
		return false
	}
	s, err := bundle.EmptySet(t.Layers[0].Path)
	if err != nil {
		return false
	}
	defer s.Close()
	return bundle.FormatDigest(s.Read[0].FileDigest()) == t.Layers[0].Digest
}

// treeChanges says how a tree changed since install: its new files, as
// harvest counts them, new directories apart (issue 25, U43).
func treeChanges(c *loadcmd.TreeChange) string {
	dirs := ""
	if c.NewDirs > 0 {
		dirs = fmt.Sprintf(" (and %s)", plural(c.NewDirs, "new directory", "new directories"))
	}
	return fmt.Sprintf("changed since install: %s%s, %d changed, %d missing",
		plural(c.New-c.NewDirs, "new file", "new files"), dirs, c.Changed, c.Missing)
}
