package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/internal/hostlist"
	"github.com/kbundle/kbundle/mpi"
)

// nodeStatusJSON is one node of `kbundle status --json` under a launcher.
type nodeStatusJSON = loadcmd.NodeTrees

// statusNodesJSON is `kbundle status --json` under a launcher: one
// object, from rank 0, with every node.
type statusNodesJSON struct {
	jsonHead
	Nodes []nodeStatusJSON `json:"nodes"`
}

// statusNodes is `kbundle status` under a launcher of several tasks:
// collective, once per node (the lowest rank of each reads its trees),
// gathered on rank 0, which prints one line a node and tree, the nodes
// whose lines are identical merged in hostlist form. Every rank exits
// with the same status.
func statusNodes(c *cli.Context, det detect.Result, dests []string, d time.Duration) (err error) {
	l := newLoader(c, det) // rank 0 speaks, and alone reports a signal (U46)
	if !mpi.Enabled {
		return l.fail(fmt.Sprintf("this kbundle was built without MPI, and the launcher started %d tasks: status under a launcher runs once per node "+
			"and needs the MPI build (or run it without the launcher, on each node)", det.Size), exitUsage)
	}
	if err := l.mismatch(det, 0); err != nil {
		return err
	}
	w, done, jerr := l.joinMPI(det, "status", d)
	if jerr != nil {
		return jerr
	}
	defer done(&err)
	world := loadcmd.Own(w, nil)
	var out statusNodesJSON
	var bad int64
	out.Nodes, bad, err = loadcmd.StatusNodes(world, dests, os.Getenv)
	switch {
	case errors.Is(err, loadcmd.ErrUsage):
		return l.fail(err.Error(), exitUsage)
	case err != nil:
		return cli.Exit(err.Error(), exitError)
	}
	if world.Rank() == 0 {
		out.jsonHead = okHead()
		if bad > 0 {
			out.jsonHead = failedHead(exitError, fmt.Sprintf("%d trees on the nodes are not kbundle's or could not be read", bad), nil)
		}
		if c.Bool("json") {
			if err := writeJSON(c.App.Writer, out); err != nil {
				return err
			}
		} else {
			for _, line := range nodeStatusLines(out.Nodes) {
				fmt.Fprintln(c.App.Writer, line)
			}
		}
	}
	if bad > 0 {
		return l.fail(fmt.Sprintf("%d trees on the nodes are not kbundle's or could not be read (named above)", bad), exitError)
	}
	return nil
}

// nodeStatusLines are one line a tree, "HOSTS: DEST: what", the nodes
// whose lines are all the same merged (hostlist form), in the order the
// nodes first said them.
func nodeStatusLines(nodes []nodeStatusJSON) []string {
	var order []string
	hosts := map[string][]string{}
	for _, n := range nodes {
		var lines []string
		for i := range n.Trees {
			lines = append(lines, treeLine(&n.Trees[i]))
		}
		if len(lines) == 0 {
			lines = []string{"nothing installed"}
		}
		key := strings.Join(lines, "\n")
		if _, ok := hosts[key]; !ok {
			order = append(order, key)
		}
		hosts[key] = append(hosts[key], n.Host)
	}
	var out []string
	for _, key := range order {
		who := safe(hostlist.Format(hosts[key]))
		for _, line := range strings.Split(key, "\n") {
			out = append(out, who+": "+line)
		}
	}
	return out
}

// treeLine is one tree's status in one line, without what differs from
// node to node by nature (the install time, the host).
func treeLine(t *statusTree) string {
	if t.State != stateInstalled {
		return safe(t.Dest) + ": " + safe(t.Reason)
	}
	what := "installed"
	if t.Job != "" {
		what += " by job " + safe(t.Job)
	}
	tree := "unchanged since install"
	if !t.Tree.Unchanged {
		tree = treeChanges(t.Tree)
	}
	return fmt.Sprintf("%s: %s, set %s (%s), %s, %s; %s", safe(t.Dest), what, t.ContentDigest, plural(len(t.Layers), "layer", "layers"),
		plural(t.Entries, "entry", "entries"), human(t.Bytes), tree)
}
