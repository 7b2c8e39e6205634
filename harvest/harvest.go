// Package harvest gathers what a job compiled into its bundle set: what
// `kbundle harvest` does, collectively, at the end of a job. Each node
// leader compares its DEST with the install record `load` wrote there
// (relocation undone first), sends rank 0 the list of its new and changed
// files (names, sizes, digests), rank 0 chooses each cache unit once
// (every file of a unit from one node: the lowest rank holding it), then
// only the chosen bytes move, leader to rank 0, in bounded memory, and
// rank 0, the only writer on the shared file system, writes them as one
// new layer of the set (bundle.WriteLayer). A job that compiled nothing
// writes no layer.
//
// The leaders also tell rank 0 which cache units the job read: a file
// read since the install has an access time past the record's install
// time (relatime and strictatime mounts; on a noatime mount the use is
// unknown and every unit counts as used). Rank 0 records the units' last
// use in a use record of the set (bundle.WriteUseRecord) and, with
// Plan.MaxSize, prunes the set when it passes the limit
// (bundle.MergeSet's MaxSize: the least recently used units go).
//
// It writes into a DEST only its harvest record (bundle.HarvestedMarker,
// once the harvest succeeded), and reads no environment variable.
package harvest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/preset"
)

// P2P is what Run needs of the leaders' communicator besides
// broadcast.NodeComm: point-to-point bytes (mpi.Comm and
// broadcasttest.Comm have them).
type P2P = broadcast.P2P

// A Plan says what Run harvests.
type Plan struct {
	// Bundle is the set's path; rank 0's is used. "": the set rank 0's
	// DEST was loaded from (its install record's first layer).
	Bundle string
	Dest   string // this node's DEST (as given to load, or its default)
	// Search, when not "", is the prefix of the user's default DESTs
	// (load.DestPrefix): Dest was not given but is the job's default,
	// and a leader where it does not exist harvests the newest tree of
	// the user's named so that kbundle installed from the set on this
	// host (a bare mpirun's launches each have a job id of their own).
	Search       string
	Host         string // this node's name, for the report
	RanksPerNode int    // as load.Plan.RanksPerNode (tests)
	// Placement is as load.Plan.Placement: the same on every rank.
	Placement broadcast.Placement
	Chunk     int // file bytes per message, before compression; 0: DefaultChunk
	Writer    bundle.WriterOptions
	Trust     *bundle.TrustPolicy
	DryRun    bool   // choose and report, move and write nothing
	Job       string // the job id, for the use record
	// MaxSize, when above 0, bounds the set's merged view (raw bytes):
	// past it, rank 0 merges the set without its least recently used
	// cache units, down to 90 % (bundle.MergeOptions.MaxSize).
	MaxSize int64
	// Meta, given rank 0's DEST, is more metadata for the layer: the
	// machine and toolchain of the job that compiled it (docs/FORMAT.md).
	// Called on rank 0 only, and only when a layer is written.
	Meta func(dest string) map[string]string
	// Python is the interpreter whose sqlite3 module rank 0 merges the
	// nodes' copies of a whole-file database with (preset.MergeDB):
	// "": python3 on PATH.
	Python string
	// Failpoint, when not nil, is called at each step of the harvest, for
	// tests that kill a rank there: "announce" (a leader sent its list;
	// rank 0 received them all), "transfer" (a leader sent its first
	// message of file bytes; rank 0 added its first file to the layer),
	// then on rank 0 bundle.LayerOptions.Failpoint's "written", "claimed"
	// and "published".
	Failpoint func(step string)
	// Getenv reads this process's environment, for the cause of a cold
	// cache (use.go): whether the presets' variables were passed to this
	// step of the job. Local, given a leader's DEST, is its node's
	// machine and toolchain (as Meta). Either nil: not known.
	Getenv func(string) string
	Local  func(dest string) map[string]string
}

func (p *Plan) failpoint(step string) {
	if p.Failpoint != nil {
		p.Failpoint(step)
	}
}

// DefaultChunk is how many of a file's bytes each message carries (before
// compression).
const DefaultChunk = 4 << 20

// A File is one new or changed file of a node's DEST.
type File struct {
	Name   string        `json:"name"`
	Size   int64         `json:"size"`
	Mode   uint32        `json:"mode"`
	Mtime  int64         `json:"mtime_ns"`
	Digest bundle.Digest `json:"-"`
	Dig    string        `json:"digest"`
	New    bool          `json:"new"`            // not in the record (else changed)
	Kept   bool          `json:"kept,omitempty"` // unchanged, sent with its changed unit
	// Rewritten: kept, but written again since the install (its time
	// moved, its bytes did not): compiled again (use.go).
	Rewritten bool `json:"rewritten,omitempty"`
}

// A Skip is a path harvest left out, and why.
type Skip struct {
	Name string `json:"name"`
	Why  string `json:"why"`
}

// A NodeReport says what one node compiled that the set lacked.
type NodeReport struct {
	Host       string `json:"host"`
	FirstRank  int    `json:"first_rank"`
	LastRank   int    `json:"last_rank"`
	Entries    int    `json:"entries"`
	Bytes      int64  `json:"bytes"`
	Elsewhere  int    `json:"also_on_other_nodes"`
	Chosen     int    `json:"chosen"` // files taken from this node
	Skipped    []Skip `json:"skipped,omitempty"`
	Error      string `json:"error,omitempty"`
	NoRecord   bool   `json:"no_record,omitempty"`
	MissingDir bool   `json:"missing_dest,omitempty"`
	// Dest is the DEST harvested (or, with missing_dest, looked for);
	// DestNote says how it was found when it is not the one given or the
	// job's default, or what was looked for when none was.
	Dest     string `json:"dest"`
	DestNote string `json:"dest_note,omitempty"`
	// OtherSet, with missing_dest, is the set the newest tree here was
	// loaded from when none was from the set harvested (DestNote names
	// the tree).
	OtherSet  string `json:"other_set,omitempty"`
	UnitsUsed int    `json:"units_used"` // cache units of DEST read since the install
	// UsageUnknown says why the node could not tell what the job read
	// (its DEST is mounted noatime): every unit counts as used.
	UsageUnknown string `json:"usage_unknown,omitempty"`
	// Presets say, per preset, what the job did with the cache (use.go).
	Presets []PresetUse `json:"presets"`
}

// Summary is Run's outcome, the same on every rank.
type Summary struct {
	Nodes []NodeReport `json:"nodes"`
	Units int          `json:"units"` // cache units written
	Files int          `json:"files"` // files written
	// Replaced names what of the set the layer drops by the merged view's
	// kind-change rule (a directory of the set that the job made a file,
	// or the reverse), with why.
	Replaced []string `json:"replaced,omitempty"`
	// Kept counts those of them unchanged since the install, written
	// with their unit (a unit goes whole).
	Kept    int    `json:"kept_files,omitempty"`
	Bytes   int64  `json:"bytes"`   // their size
	Layer   string `json:"layer"`   // the published bundle ("": none)
	Base    bool   `json:"base"`    // it became the set's base
	Digest  string `json:"digest"`  // its whole-file digest
	Content string `json:"content"` // its content digest
	Packed  int64  `json:"packed_bytes"`
	DryRun  bool   `json:"dry_run,omitempty"`
	Set     string `json:"set"` // the set harvested into: rank 0's Plan.Bundle
	// UnitsUsed counts the cache units the job read, on any node, and
	// UsageUnknown names the hosts that could not tell (noatime).
	UnitsUsed    int      `json:"units_used"`
	UsageUnknown []string `json:"usage_unknown,omitempty"`
	// UseRecord is where their last use was recorded ("": nothing to
	// record, or a dry run).
	UseRecord string `json:"use_record,omitempty"`
	// UsesRecorded counts the units read whose last use the set's use
	// records already held to within a day: not recorded again.
	UsesRecorded int `json:"uses_recorded,omitempty"`
	// With Plan.MaxSize: SetBytes is the set's merged view's raw size
	// (after pruning), Prune what pruning dropped (or would drop, in a
	// dry run) and Folded the layers its merge folded; PruneNote why a
	// set over the limit was not pruned.
	MaxSize   int64         `json:"max_size,omitempty"`
	SetBytes  int64         `json:"set_raw_bytes,omitempty"`
	Prune     *bundle.Prune `json:"prune,omitempty"`
	Folded    int           `json:"folded,omitempty"`
	PruneNote string        `json:"prune_note,omitempty"`
	// Untrusted is why a load would refuse the published bundle as
	// untrusted (its file or a directory on the way): "" when it would not.
	Untrusted string `json:"untrusted,omitempty"`
	// UsesSkipped are the use records pruning left out (untrusted owner,
	// damaged), each "PATH: why".
	UsesSkipped []string `json:"uses_skipped,omitempty"`
	// Verdict is the job's line: "cache: warm (47 of 48 units used; 1
	// new)", or the likely cause of a cold one (use.go).
	Verdict string `json:"verdict"`
	// Merged are the whole-file databases whose nodes' copies the layer
	// holds merged, record by record (preset.MergeDB).
	Merged []DBMerge `json:"merged_databases,omitempty"`
}

// list is what a leader sends rank 0.
type list struct {
	Host        string
	First, Last int
	Dest        string
	Files       []File
	Skipped     []Skip
	Err         string
	NoRecord    bool
	Missing     bool
	Origin      string
	// Set is the set DEST was loaded from (its record's first layer);
	// DestNote as NodeReport's; Refused a refusal (ErrRefused) of this
	// leader's: two trees equally likely to be its DEST.
	Set      string
	DestNote string
	OtherSet string // as NodeReport's
	Refused  string
	// Presets are the presets DEST was loaded with (its install record):
	// rank 0's go into the layer. Not sent.
	Presets []string `json:"-"`
	// Used are the cache units read since the install: unit → the newest
	// access time (ns) of its files. UsageUnknown says why the node
	// cannot tell ("": it can).
	Used         map[string]int64
	UsageUnknown string
	// Loaded counts the install record's cache units per top directory
	// of DEST; Unpassed are the presets' variables this step was not
	// given (unset, or naming another directory), Local the node's
	// machine and toolchain, both only when a preset looks cold (use.go).
	Loaded   map[string]int
	Unpassed []string          `json:",omitempty"`
	Local    map[string]string `json:",omitempty"`
}

const (
	tagList = 1 + iota
	tagChoice
	tagData
)

// Run harvests on every rank of world; it is collective.
func Run(ctx context.Context, world broadcast.NodeComm, plan Plan) (*Summary, error) {
	if plan.Chunk <= 0 {
		plan.Chunk = DefaultChunk
	}
	plan.Chunk = min(plan.Chunk, maxPiece)
	nodes, err := broadcast.SplitNodes(world, plan.RanksPerNode, plan.Placement)
	if err != nil {
		return nil, fmt.Errorf("%w: harvest: %w", broadcast.ErrComm, err)
	}
	defer nodes.Free()
	plan.Dest = nodes.Dest(plan.Dest)
	leader := nodes.Leader
	var where destFound
	if err := shareSet(world, &plan, leader, &where); err != nil {
		return nil, err
	}
	var out []byte
	if leader {
		out, err = lead(ctx, nodes.Leaders, plan, nodes.First, nodes.Last, where)
		if err != nil {
			return nil, err // a communicator failure: local
		}
	}
	// Rank 0 (a leader, rank 0 of the leaders) tells every rank.
	if out, err = broadcast.BcastBytes(world, out, maxMsg); err != nil {
		return nil, commErr("outcome", err)
	}
	var res struct {
		Sum     *Summary
		Err     string
		Refused bool
		Fix     Fix
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("harvest: outcome from rank 0: %w", err)
	}
	if leader && res.Err == "" && res.Sum != nil && !plan.DryRun && where.refused == "" {
		// Each node's DEST records that its changes went back (U44):
		// status says so, and clean warns about a tree that was not.
		// Best effort: a DEST kbundle did not install gets none.
		bundle.WriteHarvestRecord(where.dest, res.Sum.Set, res.Sum.Layer)
	}
	switch {
	case res.Err != "" && res.Refused:
		return res.Sum, &Refusal{Msg: res.Err, Fix: res.Fix}
	case res.Err != "":
		return res.Sum, errors.New(res.Err)
	}
	return res.Sum, nil
}

// lead is a leader's part; on rank 0 it returns the outcome to broadcast.
func lead(ctx context.Context, group broadcast.NodeComm, plan Plan, first, last int, where destFound) ([]byte, error) {
	p2p, ok := group.(P2P)
	if !ok && group.Size() > 1 {
		return nil, commErr("leaders", errors.New("the communicator has no point-to-point Send and Recv"))
	}
	plan.Dest = where.dest
	mine := &list{Dest: absDest(where.dest), Missing: true}
	if where.refused == "" {
		mine = scan(where.dest)
		probe(plan, mine)
	}
	mine.Host, mine.First, mine.Last = plan.Host, first, last
	mine.DestNote, mine.OtherSet, mine.Refused = where.note, where.other, where.refused
	if group.Rank() != 0 {
		return nil, follow(p2p, plan, mine)
	}
	return collect(ctx, p2p, group.Size(), plan, mine)
}

// follow is the part of a leader other than rank 0: it sends rank 0 its
// list, receives the choice and the origin, and sends the chosen files.
func follow(p2p P2P, plan Plan, mine *list) error {
	b, _ := json.Marshal(mine)
	if err := broadcast.SendMsg(p2p, b, 0, tagList); err != nil {
		return commErr("send the list", err)
	}
	plan.failpoint("announce")
	b, err := broadcast.RecvMsg(p2p, 0, tagChoice, maxMsg)
	if err != nil {
		return commErr("receive the choice", err)
	}
	var choice []int
	if err := json.Unmarshal(b, &choice); err != nil {
		return commErr("receive the choice", err)
	}
	origin, err := broadcast.RecvMsg(p2p, 0, tagChoice, maxMsg)
	if err != nil {
		return commErr("receive the origin", err)
	}
	var once sync.Once
	out := newRunSender(p2p, plan.Chunk, func() { once.Do(func() { plan.failpoint("transfer") }) })
	for _, i := range choice {
		if err := out.add(plan, mine.Files[i], string(origin)); err != nil {
			return err
		}
	}
	return out.flush()
}

// collect is rank 0's part of the leaders': it gathers every leader's
// list (its own first), checks them against the set, chooses, writes the
// layer from what the leaders send and settles; it returns the outcome
// to broadcast. An error is a communicator failure.
func collect(ctx context.Context, p2p P2P, leaders int, plan Plan, mine *list) ([]byte, error) {
	if !plan.DryRun {
		// What a harvest killed here before left beside the set (a
		// temporary layer), if it proves stale (bundle.RemoveStale); also
		// when this one has nothing to write.
		bundle.RemoveStale(filepath.Dir(plan.Bundle))
	}
	lists, err := gatherLists(p2p, leaders, mine)
	if err != nil {
		return nil, err
	}
	plan.failpoint("announce")
	if err := checkSet(plan, lists); err != nil {
		for r := 1; r < leaders; r++ {
			if err := sendChoice(p2p, r, nil, ""); err != nil {
				return nil, err
			}
		}
		return outcome(&Summary{Set: plan.Bundle, DryRun: plan.DryRun, Nodes: []NodeReport{}}, err), nil
	}
	look := lookAtSet(plan.Bundle, plan.Trust)
	defer look.close()
	have, units := look.view()
	sum, choice := choose(lists, have)
	dbs := mergeCopies(lists, have, sum, choice, func(n string) string { return preset.MergeDB(mine.Presets, n) })
	defer dbs.close()
	sum.DryRun, sum.MaxSize, sum.Set = plan.DryRun, plan.MaxSize, plan.Bundle
	now := time.Now()
	uses := jobUses(sum, lists, units, now)
	explain(sum, lists, have, look.meta)
	origin := mine.Origin
	if origin == "" {
		origin = mine.Dest // no base yet: the layer reads as packed in rank 0's DEST
	}
	total := 0
	for _, c := range choice {
		total += len(c)
	}
	var werr error
	if total > 0 && !plan.DryRun {
		if n, err := look.pending(); err == nil && n >= bundle.MaxLayers {
			werr = fmt.Errorf("%s has %d layers already (limit %d); run kbundle merge %s, then harvest again", plan.Bundle, n, bundle.MaxLayers, plan.Bundle)
		}
	}
	if total == 0 || plan.DryRun || werr != nil {
		for r := 1; r < leaders; r++ {
			if err := sendChoice(p2p, r, nil, origin); err != nil {
				return nil, err
			}
		}
		if werr == nil {
			settle(ctx, plan, look, sum, lists, choice, uses, now)
		}
		return outcome(sum, werr), nil
	}
	for r := 1; r < leaders; r++ {
		if err := sendChoice(p2p, r, choice[r], origin); err != nil {
			return nil, err
		}
	}
	look.close() // read: the set is opened again only after the layer is published
	pub, err := writeLayer(ctx, p2p, plan, lists, choice, dbs, sum, mine, origin)
	if errors.Is(err, broadcast.ErrComm) {
		return nil, err
	}
	if err != nil {
		return outcome(sum, err), nil
	}
	sum.Layer, sum.Base, sum.Digest, sum.Content, sum.Packed = pub.Path, pub.Base, bundle.FormatDigest(pub.Digest), bundle.FormatDigest(pub.Content), pub.Size
	if pub.Untrusted != nil {
		sum.Untrusted = pub.Untrusted.Error()
	}
	settle(ctx, plan, look, sum, lists, choice, uses, now)
	return outcome(sum, nil), nil
}

// gatherLists receives the list of every leader after rank 0, in rank
// order, after mine.
func gatherLists(p2p P2P, leaders int, mine *list) ([]*list, error) {
	lists := []*list{mine}
	for r := 1; r < leaders; r++ {
		b, err := broadcast.RecvMsg(p2p, r, tagList, maxMsg)
		if err != nil {
			return nil, commErr("receive a list", err)
		}
		l := &list{}
		if err := json.Unmarshal(b, l); err != nil {
			return nil, commErr("receive a list", err)
		}
		for i := range l.Files {
			if l.Files[i].Digest, err = bundle.ParseDigest(l.Files[i].Dig); err != nil {
				return nil, commErr("receive a list", err)
			}
		}
		lists = append(lists, l)
	}
	return lists, nil
}
