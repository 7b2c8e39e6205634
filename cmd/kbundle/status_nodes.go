package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/internal/hostlist"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
)

// nodeStatusJSON is one node of `kbundle status --json` under a launcher.
type nodeStatusJSON struct {
	Host      string       `json:"host"`
	FirstRank int          `json:"first_rank"`
	LastRank  int          `json:"last_rank"`
	Trees     []statusTree `json:"trees"`
}

// statusNodesJSON is `kbundle status --json` under a launcher: one
// object, from rank 0, with every node.
type statusNodesJSON struct {
	jsonHead
	Nodes []nodeStatusJSON `json:"nodes"`
}

// statusTag tags the nodes' status messages.
const statusTag = 29

// statusNodes is `kbundle status` under a launcher of several tasks:
// collective, once per node (the lowest rank of each reads its trees),
// gathered on rank 0, which prints one line a node and tree, the nodes
// whose lines are identical merged in hostlist form. Every rank exits
// with the same status.
func statusNodes(c *cli.Context, det detect.Result, dests []string) (err error) {
	l := &loader{c: c, rank: max(det.Rank, 0), speaker: det.Rank <= 0}
	if !mpi.Enabled {
		return l.fail(fmt.Sprintf("this kbundle was built without MPI, and the launcher started %d tasks: status under a launcher runs once per node "+
			"and needs the MPI build (or run it without the launcher, on each node)", det.Size), exitUsage)
	}
	if err := l.mismatch(det, 0); err != nil {
		return err
	}
	w, done, jerr := l.joinMPI(det, "status", timeout(c))
	if jerr != nil {
		return jerr
	}
	defer done(&err)
	world := broadcast.FromMPI(w)
	lp, kerr := loadcmd.Knobs(os.Getenv)
	if kerr != nil {
		return l.fail(kerr.Error(), exitUsage)
	}
	var node broadcast.NodeComm
	if lp.RanksPerNode > 0 {
		node, err = world.Split(world.Rank()/lp.RanksPerNode, world.Rank())
		for i := range dests {
			dests[i] = load.FakeNodeDest(dests[i], lp.RanksPerNode, world.Rank())
		}
	} else {
		node, err = world.SplitShared()
	}
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	defer node.Free()
	first, err1 := node.AllreduceInt64(int64(world.Rank()), mpi.Min)
	last, err2 := node.AllreduceInt64(int64(world.Rank()), mpi.Max)
	if err := errors.Join(err1, err2); err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	color := 1
	if node.Rank() == 0 {
		color = 0
	}
	group, err := world.Split(color, world.Rank())
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	defer group.Free()
	bad := int64(0)
	var out statusNodesJSON
	if color == 0 {
		mine := nodeStatusJSON{Host: lp.Host, FirstRank: int(first), LastRank: int(last)}
		mine.Trees, bad = collectStatus(dests)
		if out.Nodes, err = gatherStatus(group, mine); err != nil {
			return cli.Exit(err.Error(), exitError)
		}
	}
	if bad, err = world.AllreduceInt64(bad, mpi.Sum); err != nil {
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

// gatherStatus sends this leader's status to rank 0 of group, which
// returns every leader's, in rank order.
func gatherStatus(group broadcast.NodeComm, mine nodeStatusJSON) ([]nodeStatusJSON, error) {
	if group.Size() == 1 {
		return []nodeStatusJSON{mine}, nil
	}
	p2p, ok := group.(broadcast.P2P)
	if !ok {
		return nil, errors.New("status: the communicator has no point-to-point messages")
	}
	if group.Rank() != 0 {
		b, _ := json.Marshal(mine)
		return nil, broadcast.SendMsg(p2p, b, 0, statusTag)
	}
	all := []nodeStatusJSON{mine}
	for r := 1; r < group.Size(); r++ {
		b, err := broadcast.RecvMsg(p2p, r, statusTag, 1<<30)
		if err != nil {
			return nil, fmt.Errorf("status: from leader %d: %w", r, err)
		}
		var n nodeStatusJSON
		if err := json.Unmarshal(b, &n); err != nil {
			return nil, fmt.Errorf("status: from leader %d: %w", r, err)
		}
		all = append(all, n)
	}
	return all, nil
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
