package loadcmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
)

// Tree states in `kbundle status`.
const (
	StateInstalled   = "installed"    // a record, read: the fields below are filled
	StateMissing     = "missing"      // DEST does not exist: nothing installed
	StateOldMarker   = "old_marker"   // installed by an older kbundle, without a record
	StateNewerRecord = "newer_record" // a record of a version this kbundle does not read
	StateNotKbundle  = "not_kbundle"  // not a tree kbundle installed (or not yours)
	StateUnreadable  = "unreadable"   // the record or the tree could not be read
)

// A Tree is one DEST as `kbundle status` and Python's status() report it
// (its --json form); fields are only ever added.
type Tree struct {
	Dest  string `json:"dest"`
	State string `json:"state"`
	// Reason says why a tree is not "installed" ("" when it is).
	Reason string `json:"reason,omitempty"`
	// From the install record (state "installed").
	RecordedDest  string      `json:"recorded_dest,omitempty"`
	ContentDigest string      `json:"content_digest,omitempty"`
	Layers        []TreeLayer `json:"layers,omitempty"`
	Installed     string      `json:"installed,omitempty"`
	Job           string      `json:"job,omitempty"`
	Host          string      `json:"host,omitempty"`
	Presets       []string    `json:"presets,omitempty"`
	Env           []string    `json:"env,omitempty"`
	Entries       int         `json:"entries"`
	Files         int         `json:"files"`
	Dirs          int         `json:"dirs"`
	Bytes         int64       `json:"bytes"`
	Tree          *TreeChange `json:"tree,omitempty"`
	// Harvested is the tree's last harvest (its harvest record), nil
	// when none was since its install.
	Harvested *bundle.HarvestRecord `json:"harvested,omitempty"`
	RawBytes  int64                 `json:"raw_bytes"` // Bytes, under its canonical name
	// Used says when the tree's cache units were last read (access
	// times past the install).
	Used *TreeUse `json:"used,omitempty"`
}

// TreeLayer is one bundle of an installed set, as its install record
// names it, with its whole-file digest under the canonical name too.
type TreeLayer struct {
	bundle.RecordLayer
	FileDigest string `json:"file_digest"`
}

// TreeChange is how the tree differs from its record, counted.
type TreeChange struct {
	Unchanged bool `json:"unchanged"`
	New       int  `json:"new"`
	// NewDirs is how many of the New entries are directories: the
	// others are files, what harvest counts (issue 25, U43).
	NewDirs int `json:"new_dirs"`
	Changed int `json:"changed"`
	Missing int `json:"missing"`
}

// Status is the status of each DEST, or without DEST of every
// tree of yours named like the default DEST (directories kbundle did not
// install are left out then) and $KBUNDLE_LOCAL_DIR's, and how many are
// not kbundle's or could not be read.
func Status(dests []string, getenv func(string) string) ([]Tree, int64) {
	scanned := len(dests) == 0
	if scanned {
		var err error
		if dests, err = bundle.MineTrees(MinePrefix(getenv("TMPDIR"), UserName()), os.Geteuid()); err != nil {
			return []Tree{{Dest: MinePrefix(getenv("TMPDIR"), UserName()) + "*", State: StateUnreadable, Reason: err.Error()}}, 1
		}
		// $KBUNDLE_LOCAL_DIR is load's and harvest's default DEST too.
		if d := getenv("KBUNDLE_LOCAL_DIR"); d != "" && !slices.Contains(dests, d) {
			dests = append(dests, d)
		}
	}
	trees := []Tree{}
	var bad int64
	for _, d := range dests {
		t := TreeStatus(d)
		if t.State == StateNotKbundle || t.State == StateUnreadable {
			if scanned && t.State == StateNotKbundle {
				continue // a directory of yours named so, that kbundle did not install
			}
			bad++
		}
		trees = append(trees, t)
	}
	return trees, bad
}

// TreeStatus reads what is installed at dest.
func TreeStatus(dest string) Tree {
	t := Tree{Dest: dest}
	if abs, err := filepath.Abs(dest); err == nil {
		dest = abs
	}
	fi, err := os.Lstat(dest)
	switch {
	case errors.Is(err, os.ErrNotExist):
		t.State, t.Reason = StateMissing, "nothing installed (it does not exist)"
		return t
	case err != nil:
		t.State, t.Reason = StateUnreadable, err.Error()
		return t
	case fi.Mode()&os.ModeSymlink != 0:
		t.State, t.Reason = StateNotKbundle, "it is a symlink, which kbundle does not follow; give the directory it points to"
		return t
	case !fi.IsDir():
		t.State, t.Reason = StateNotKbundle, "it is not a directory"
		return t
	}
	rec, err := bundle.ReadInstallRecord(dest)
	switch {
	case errors.Is(err, bundle.ErrOldMarker):
		t.State, t.Reason = StateOldMarker, "installed by an older kbundle, which wrote no record of the tree"
		return t
	case errors.Is(err, bundle.ErrNoRecord):
		var e *bundle.Error
		t.State, t.Reason = StateNotKbundle, err.Error()
		if errors.As(err, &e) {
			t.Reason = "not a tree kbundle installed: " + e.Msg
		}
		return t
	case errors.Is(err, bundle.ErrVersion):
		t.State, t.Reason = StateNewerRecord, "installed by a newer kbundle: "+err.Error()
		return t
	case err != nil:
		t.State, t.Reason = StateUnreadable, "cannot read its install record: "+err.Error()
		return t
	}
	t.fromRecord(dest, rec)
	t.Used = treeUse(dest, rec) // before CompareTree, which may read files
	ch, err := bundle.CompareTree(dest, rec)
	if err != nil {
		t.State, t.Reason = StateUnreadable, err.Error()
		return t
	}
	if h, err := bundle.ReadHarvestRecord(dest); err == nil {
		t.Harvested = h
	}
	t.Tree = &TreeChange{Unchanged: ch.Same(), New: len(ch.New), Changed: len(ch.Changed), Missing: len(ch.Missing)}
	for _, n := range ch.New {
		if fi, err := os.Lstat(filepath.Join(dest, filepath.FromSlash(n))); err == nil && fi.IsDir() {
			t.Tree.NewDirs++
		}
	}
	return t
}

// fromRecord fills in what the install record rec of the tree at dest
// says: its layers, when and where it was installed, its entries and the
// presets' environment (none when a preset is unknown here).
func (t *Tree) fromRecord(dest string, rec *bundle.InstallRecord) {
	t.State = StateInstalled
	if rec.Dest != dest {
		t.RecordedDest = rec.Dest
	}
	t.ContentDigest = rec.ContentDigest
	for _, l := range rec.Layers {
		t.Layers = append(t.Layers, TreeLayer{RecordLayer: l, FileDigest: l.Digest})
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
	var presets []*preset.Preset
	for _, n := range rec.Presets {
		if p, err := preset.Lookup(n); err == nil {
			presets = append(presets, p)
		}
	}
	if len(presets) == len(rec.Presets) {
		t.Env, _ = preset.EnvFor(dest, presets...)
	}
}

// MinePrefix is the pattern of the default DEST's siblings of user under
// tmp ($TMPDIR, "": /tmp): every default DEST of theirs, of any job, is
// named so (load.Dest).
func MinePrefix(tmp, user string) string {
	return load.DestPrefix(tmp, user)
}

// A StatusRequest is kbundle_status's JSON argument: the DESTs (none:
// the default DEST's siblings under Environ's TMPDIR) and the caller's
// environment.
type StatusRequest struct {
	Dests   []string          `json:"dests"`
	Environ map[string]string `json:"environ"`
}

// A StatusAnswer is kbundle_status's answer: `kbundle status --json`'s
// object on this node.
type StatusAnswer struct {
	SchemaVersion int    `json:"schema_version"`
	OK            bool   `json:"ok"`
	Kind          Kind   `json:"kind,omitempty"`
	Reason        string `json:"reason,omitempty"`
	Trees         []Tree `json:"trees"`
}

// StatusOf answers a StatusRequest (JSON): the status of each tree on
// this node, as `kbundle status` reads it; ok is false, with the reasons,
// when a DEST is not a tree kbundle installed or cannot be read. It makes
// no MPI call.
func StatusOf(req []byte) StatusAnswer {
	var r StatusRequest
	if err := json.Unmarshal(req, &r); err != nil {
		return StatusAnswer{SchemaVersion: SchemaVersion, Kind: Usage, Reason: "status: bad request: " + err.Error(), Trees: []Tree{}}
	}
	trees, _ := Status(r.Dests, func(k string) string { return r.Environ[k] })
	a := StatusAnswer{SchemaVersion: SchemaVersion, OK: true, Trees: trees}
	var bad []string
	for _, t := range trees {
		if t.State == StateNotKbundle || t.State == StateUnreadable {
			bad = append(bad, t.Dest+": "+t.Reason)
		}
	}
	if len(bad) > 0 {
		a.OK, a.Kind, a.Reason = false, Failed, strings.Join(bad, "\n")
	}
	return a
}

// NodeTrees is one node's trees in a collective status (`kbundle status`
// under a launcher): the node's leader, its ranks, and Status of its
// DESTs.
type NodeTrees struct {
	Host      string `json:"host"`
	FirstRank int    `json:"first_rank"`
	LastRank  int    `json:"last_rank"`
	Trees     []Tree `json:"trees"`
}

// statusTag tags the leaders' status messages.
const statusTag = 29

// StatusNodes is Status on every node of world, collective: the lowest
// rank of each node reads its trees (dests, a fake node's under
// KBUNDLE_TEST_RANKS_PER_NODE; none: the default DEST's siblings), and
// rank 0 returns every node's, in rank order. bad is how many trees on
// all nodes are not kbundle's or could not be read, the same on every
// rank. An error is this rank's communication failure, or a knob's
// usage error (ErrUsage), the same on every rank.
func StatusNodes(world broadcast.NodeComm, dests []string, getenv func(string) string) (nodes []NodeTrees, bad int64, err error) {
	k, err := knobs(getenv)
	if err != nil {
		return nil, 0, &usageError{err}
	}
	layout, err := broadcast.SplitNodes(world, k.RanksPerNode, broadcast.PlacementUnknown)
	if err != nil {
		return nil, 0, AtComm(err)
	}
	defer layout.Free()
	dests = slices.Clone(dests)
	for i := range dests {
		dests[i] = layout.Dest(dests[i])
	}
	if layout.Leader {
		mine := NodeTrees{Host: k.Host, FirstRank: layout.First, LastRank: layout.Last}
		mine.Trees, bad = Status(dests, getenv)
		if nodes, err = gatherStatus(layout.Leaders, mine); err != nil {
			return nil, 0, AtComm(err)
		}
	}
	if bad, err = world.AllreduceInt64(bad, mpi.Sum); err != nil {
		return nil, 0, AtComm(err)
	}
	return nodes, bad, nil
}

// gatherStatus sends this leader's status to rank 0 of group, which
// returns every leader's, in rank order.
func gatherStatus(group broadcast.NodeComm, mine NodeTrees) ([]NodeTrees, error) {
	if group.Size() == 1 {
		return []NodeTrees{mine}, nil
	}
	p2p, ok := group.(broadcast.P2P)
	if !ok {
		return nil, errors.New("status: the communicator has no point-to-point messages")
	}
	if group.Rank() != 0 {
		b, _ := json.Marshal(mine)
		return nil, broadcast.SendMsg(p2p, b, 0, statusTag)
	}
	all := []NodeTrees{mine}
	for r := 1; r < group.Size(); r++ {
		b, err := broadcast.RecvMsg(p2p, r, statusTag, 1<<30)
		if err != nil {
			return nil, fmt.Errorf("status: from leader %d: %w", r, err)
		}
		var n NodeTrees
		if err := json.Unmarshal(b, &n); err != nil {
			return nil, fmt.Errorf("status: from leader %d: %w", r, err)
		}
		all = append(all, n)
	}
	return all, nil
}
