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
// It never writes into a DEST, and reads no environment variable.
package harvest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/hostlist"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
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
	Chunk        int    // file bytes per message, before compression; 0: DefaultChunk
	Writer       bundle.WriterOptions
	Trust        *bundle.TrustPolicy
	DryRun       bool   // choose and report, move and write nothing
	Job          string // the job id, for the use record
	// MaxSize, when above 0, bounds the set's merged view (raw bytes):
	// past it, rank 0 merges the set without its least recently used
	// cache units, down to 90 % (bundle.MergeOptions.MaxSize).
	MaxSize int64
	// Meta, given rank 0's DEST, is more metadata for the layer: the
	// machine and toolchain of the job that compiled it (docs/FORMAT.md).
	// Called on rank 0 only, and only when a layer is written.
	Meta func(dest string) map[string]string
	// Failpoint, when not nil, is called at each step of the harvest, for
	// tests that kill a rank there: "announce" (a leader sent its list;
	// rank 0 received them all), "transfer" (a leader sent its first
	// message of file bytes; rank 0 added its first file to the layer),
	// then on rank 0 bundle.LayerOptions.Failpoint's "written" and
	// "published".
	Failpoint func(step string)
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
	Dest      string `json:"dest"`
	DestNote  string `json:"dest_note,omitempty"`
	UnitsUsed int    `json:"units_used"` // cache units of DEST read since the install
	// UsageUnknown says why the node could not tell what the job read
	// (its DEST is mounted noatime): every unit counts as used.
	UsageUnknown string `json:"usage_unknown,omitempty"`
}

// Summary is Run's outcome, the same on every rank.
type Summary struct {
	Nodes   []NodeReport `json:"nodes"`
	Units   int          `json:"units"`   // cache units written
	Files   int          `json:"files"`   // files written
	Bytes   int64        `json:"bytes"`   // their size
	Layer   string       `json:"layer"`   // the published bundle ("": none)
	Base    bool         `json:"base"`    // it became the set's base
	Digest  string       `json:"digest"`  // its whole-file digest
	Content string       `json:"content"` // its content digest
	Packed  int64        `json:"packed_bytes"`
	DryRun  bool         `json:"dry_run,omitempty"`
	Set     string       `json:"set"` // the set harvested into: rank 0's Plan.Bundle
	// UnitsUsed counts the cache units the job read, on any node, and
	// UsageUnknown names the hosts that could not tell (noatime).
	UnitsUsed    int      `json:"units_used"`
	UsageUnknown []string `json:"usage_unknown,omitempty"`
	// UseRecord is where their last use was recorded ("": nothing to
	// record, or a dry run).
	UseRecord string `json:"use_record,omitempty"`
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
	Refused  string
	// Presets are the presets DEST was loaded with (its install record):
	// rank 0's go into the layer. Not sent.
	Presets []string `json:"-"`
	// Used are the cache units read since the install: unit → the newest
	// access time (ns) of its files. UsageUnknown says why the node
	// cannot tell ("": it can).
	Used         map[string]int64
	UsageUnknown string
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
	var node broadcast.NodeComm
	var err error
	if plan.RanksPerNode > 0 {
		node, err = world.Split(world.Rank()/plan.RanksPerNode, world.Rank())
		plan.Dest = load.FakeNodeDest(plan.Dest, plan.RanksPerNode, world.Rank())
	} else {
		node, err = world.SplitShared()
	}
	if err != nil {
		return nil, commErr("split by node", err)
	}
	defer node.Free()
	leader := node.Rank() == 0
	var where destFound
	if err := shareSet(world, &plan, leader, &where); err != nil {
		return nil, err
	}
	first, err := node.AllreduceInt64(int64(world.Rank()), mpi.Min)
	if err != nil {
		return nil, commErr("node ranks", err)
	}
	last, err := node.AllreduceInt64(int64(world.Rank()), mpi.Max)
	if err != nil {
		return nil, commErr("node ranks", err)
	}
	color := 1
	if leader {
		color = 0
	}
	group, err := world.Split(color, world.Rank())
	if err != nil {
		return nil, commErr("split leaders", err)
	}
	defer group.Free()
	var out []byte
	if leader {
		out, err = lead(ctx, group, plan, int(first), int(last), where)
		if err != nil {
			return nil, err // a communicator failure: local
		}
	}
	// Rank 0 (a leader, rank 0 of the leaders) tells every rank.
	if out, err = bcastBytes(world, out, maxMsg); err != nil {
		return nil, commErr("outcome", err)
	}
	var res struct {
		Sum     *Summary
		Err     string
		Refused bool
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("harvest: outcome from rank 0: %w", err)
	}
	switch {
	case res.Err != "" && res.Refused:
		return res.Sum, &refusal{res.Err}
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
	}
	mine.Host, mine.First, mine.Last = plan.Host, first, last
	mine.DestNote, mine.Refused = where.note, where.refused
	if group.Rank() != 0 {
		b, _ := json.Marshal(mine)
		if err := broadcast.SendMsg(p2p, b, 0, tagList); err != nil {
			return nil, commErr("send the list", err)
		}
		plan.failpoint("announce")
		b, err := broadcast.RecvMsg(p2p, 0, tagChoice, maxMsg)
		if err != nil {
			return nil, commErr("receive the choice", err)
		}
		var choice []int
		if err := json.Unmarshal(b, &choice); err != nil {
			return nil, commErr("receive the choice", err)
		}
		origin, err := broadcast.RecvMsg(p2p, 0, tagChoice, maxMsg)
		if err != nil {
			return nil, commErr("receive the origin", err)
		}
		var once sync.Once
		sent := func() { once.Do(func() { plan.failpoint("transfer") }) }
		for _, i := range choice {
			if err := sendFile(p2p, plan, mine.Files[i], string(origin), plan.Chunk, sent); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	if !plan.DryRun {
		// What a harvest killed here before left beside the set (a
		// temporary layer), if it proves stale (bundle.RemoveStale); also
		// when this one has nothing to write.
		bundle.RemoveStale(filepath.Dir(plan.Bundle))
	}
	lists := []*list{mine}
	for r := 1; r < group.Size(); r++ {
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
	plan.failpoint("announce")
	if err := checkSet(plan, lists); err != nil {
		for r := 1; r < group.Size(); r++ {
			if err := sendChoice(p2p, r, nil, ""); err != nil {
				return nil, err
			}
		}
		return outcome(&Summary{Set: plan.Bundle, DryRun: plan.DryRun, Nodes: []NodeReport{}}, err), nil
	}
	have, units := setView(plan.Bundle, plan.Trust)
	sum, choice := choose(lists, have)
	sum.DryRun, sum.MaxSize, sum.Set = plan.DryRun, plan.MaxSize, plan.Bundle
	now := time.Now()
	uses := jobUses(sum, lists, units, now)
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
		if n, err := pendingLayers(plan.Bundle); err == nil && n >= bundle.MaxLayers {
			werr = fmt.Errorf("%s has %d layers already (limit %d); run kbundle merge %s, then harvest again", plan.Bundle, n, bundle.MaxLayers, plan.Bundle)
		}
	}
	if total == 0 || plan.DryRun || werr != nil {
		for r := 1; r < group.Size(); r++ {
			if err := sendChoice(p2p, r, nil, origin); err != nil {
				return nil, err
			}
		}
		if werr == nil {
			settle(ctx, plan, sum, lists, choice, uses, now)
		}
		return outcome(sum, werr), nil
	}
	for r := 1; r < group.Size(); r++ {
		if err := sendChoice(p2p, r, choice[r], origin); err != nil {
			return nil, err
		}
	}
	var commFail error
	filled := false
	var filesErr error // a file's own (fileErr): it says what to do
	pub, err := bundle.WriteLayer(ctx, plan.Bundle, &bundle.LayerOptions{Writer: plan.Writer, Trust: plan.Trust, Failpoint: plan.Failpoint}, func(w *bundle.Writer) error {
		if plan.Meta != nil {
			for k, v := range plan.Meta(mine.Dest) {
				w.SetMeta(k, v)
			}
		}
		filled = true
		if len(mine.Presets) > 0 {
			// The presets DEST was loaded with: a first harvest's base
			// carries them, so the next job's load prints their exports
			// (merge keeps the newest layer's).
			w.SetMeta(bundle.MetaPreset, strings.Join(mine.Presets, ","))
		}
		w.SetMeta(bundle.MetaOrigin, origin)
		w.SetMeta(bundle.MetaCreator, "kbundle harvest")
		var first error
		moved := false
		for r, l := range lists {
			for _, i := range choice[r] {
				f := l.Files[i]
				var err error
				if r == 0 {
					err = copyLocal(w, plan.Dest, f, origin)
				} else {
					err = recvFile(w, p2p, r, f, plan.Chunk)
					if errors.Is(err, broadcast.ErrComm) {
						commFail = err
						return err
					}
				}
				if err != nil && first == nil {
					first = fileErr(l, f, err)
				}
				if first == nil && !moved {
					moved = true
					plan.failpoint("transfer")
				}
			}
		}
		filesErr = first
		return first
	})
	if commFail != nil {
		return nil, commFail
	}
	if !filled {
		// The layer failed before it took the files (its temporary could
		// not be made): the leaders send them all the same, and a send
		// larger than MPI's eager limit completes only once received.
		if err := drain(p2p, lists, choice, plan.Chunk); err != nil {
			return nil, err
		}
	}
	if err != nil {
		if filesErr == nil {
			err = publishErr(err)
		}
		return outcome(sum, err), nil
	}
	sum.Layer, sum.Base, sum.Digest, sum.Content, sum.Packed = pub.Path, pub.Base, bundle.FormatDigest(pub.Digest), bundle.FormatDigest(pub.Content), pub.Size
	if pub.Untrusted != nil {
		sum.Untrusted = pub.Untrusted.Error()
	}
	settle(ctx, plan, sum, lists, choice, uses, now)
	return outcome(sum, nil), nil
}

// fileErr is the error of file f of node l: a file whose bytes are not
// those listed changed between its listing and its sending.
func fileErr(l *list, f File, err error) error {
	if errors.Is(err, bundle.ErrChecksum) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errChanged) {
		return fmt.Errorf("%s (rank %d): %s changed during the harvest (its bytes are not those listed); nothing was published: run kbundle harvest again once it is complete: %w", l.Host, l.First, f.Name, err)
	}
	return fmt.Errorf("%s (rank %d): %s: %w", l.Host, l.First, f.Name, err)
}

// publishErr is the error of a layer that could not be written or
// published (a full or read-only file system, a folder gone): it names
// the set, not the temporary beside it, and says what was kept (U48).
func publishErr(err error) error {
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) && strings.HasPrefix(filepath.Base(pe.Path), ".kbundle-tmp-") {
		msg = strings.Replace(msg, pe.Op+" "+pe.Path, pe.Op+" its temporary", 1)
	}
	return &harvestError{msg + "; nothing was published, and each node's DEST keeps what the job compiled: run kbundle harvest again once that is fixed", err}
}

// A harvestError is an error in words of its own, wrapping its cause.
type harvestError struct {
	msg string
	err error
}

func (e *harvestError) Error() string { return e.msg }
func (e *harvestError) Unwrap() error { return e.err }

// errChanged: a file is no longer what was listed (its size, kind or owner).
var errChanged = errors.New("changed since listed")

func outcome(sum *Summary, err error) []byte {
	v := struct {
		Sum     *Summary
		Err     string
		Refused bool
	}{Sum: sum}
	if err != nil {
		v.Err = "harvest: " + err.Error()
		v.Refused = errors.Is(err, ErrRefused)
	}
	b, _ := json.Marshal(v)
	return b
}

// pendingLayers is how many layers the set has above its base's fold.
func pendingLayers(set string) (int, error) {
	s, err := bundle.OpenSet(set, nil)
	if errors.Is(err, bundle.ErrNoSet) || errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		if errors.Is(err, bundle.ErrTooLarge) {
			return bundle.MaxLayers, nil
		}
		return 0, err
	}
	defer s.Close()
	n := len(s.Layers)
	if s.Layers[0].Seq == 0 {
		n--
	}
	return n, nil
}

// setView is the set's merged view, name → digest, and its cache units
// (none: empty).
func setView(set string, trust *bundle.TrustPolicy) (map[string]string, []string) {
	s, err := bundle.OpenSet(set, &bundle.OpenOptions{Trust: trust})
	if err != nil {
		return nil, nil
	}
	defer s.Close()
	m := map[string]string{}
	units := map[string]bool{}
	for _, e := range s.Merged(bundle.CacheUnit) {
		if !e.Dir {
			m[e.Name] = bundle.FormatDigest(e.Digest)
			units[bundle.CacheUnit(e.Name)] = true
		}
	}
	return m, slices.Sorted(maps.Keys(units))
}

// choose picks each cache unit from the lowest rank holding a new or
// changed file of it, and counts per node. choice[r] are indices into
// lists[r].Files. What it picks is a tree (docs/FORMAT.md, "Names"): a
// unit with a file where a lower rank's chosen unit has a directory, or
// below one of its files (a file x on one node, x/y on another), is left
// out whole and reported skipped on its node (dropConflicts).
func choose(lists []*list, have map[string]string) (*Summary, [][]int) {
	sum := &Summary{}
	choice := make([][]int, len(lists))
	owner := map[string]int{} // unit → list index (lists are in rank order)
	seen := map[string]int{}  // name+digest → how many nodes hold it
	for r, l := range lists {
		for _, f := range l.Files {
			if u := bundle.CacheUnit(f.Name); !has(owner, u) {
				owner[u] = r
			}
			seen[f.Name+"\x00"+f.Dig]++
		}
	}
	// A unit the set holds already, file for file, is not taken again
	// (a DEST harvested twice without a load in between).
	held := map[string]bool{}
	for u, r := range owner {
		held[u] = len(have) > 0
		for _, f := range lists[r].Files {
			if bundle.CacheUnit(f.Name) == u && have[f.Name] != f.Dig {
				held[u] = false
			}
		}
	}
	conflict := dropConflicts(lists, owner, held)
	units := map[string]bool{}
	for r, l := range lists {
		nr := NodeReport{Host: l.Host, FirstRank: l.First, LastRank: l.Last, Skipped: l.Skipped, Error: l.Err, NoRecord: l.NoRecord, MissingDir: l.Missing,
			Dest: l.Dest, DestNote: l.DestNote, UnitsUsed: len(l.Used), UsageUnknown: l.UsageUnknown}
		for i, f := range l.Files {
			u := bundle.CacheUnit(f.Name)
			if held[u] {
				continue
			}
			if why, ok := conflict[u]; ok && owner[u] == r {
				nr.Skipped = append(slices.Clip(nr.Skipped), Skip{f.Name, why(f.Name)})
				continue
			}
			if !f.Kept {
				nr.Entries++
				nr.Bytes += f.Size
				if seen[f.Name+"\x00"+f.Dig] > 1 {
					nr.Elsewhere++
				}
			}
			if owner[u] == r {
				choice[r] = append(choice[r], i)
				nr.Chosen++
				units[u] = true
				sum.Files++
				sum.Bytes += f.Size
			}
		}
		sum.Nodes = append(sum.Nodes, nr)
	}
	sum.Units = len(units)
	return sum, choice
}

func has(m map[string]int, k string) bool { _, ok := m[k]; return ok }

// dropConflicts settles what choose takes as a tree: the units owned
// (owner, not held) are taken in rank order, then by name, and one whose
// files do not fit with those taken before (a file where they have a
// directory, or a name below one of their files) is left out whole. It
// returns the units left out, each with the reason for each of its files.
// A layer's kind changes against the set are the merged view's to settle
// (the newest wins), not a conflict.
func dropConflicts(lists []*list, owner map[string]int, held map[string]bool) map[string]func(string) string {
	byUnit := map[string][]string{}
	for u, r := range owner {
		if held[u] {
			continue
		}
		for _, f := range lists[r].Files {
			if bundle.CacheUnit(f.Name) == u {
				byUnit[u] = append(byUnit[u], f.Name)
			}
		}
	}
	order := slices.SortedFunc(maps.Keys(byUnit), func(a, b string) int {
		return cmp.Or(cmp.Compare(owner[a], owner[b]), strings.Compare(a, b))
	})
	files := map[string]int{}   // a file taken → its rank
	dirs := map[string]string{} // a directory implied by the files taken → one of them
	out := map[string]func(string) string{}
	for _, u := range order {
		var clash, with string
		for _, n := range byUnit[u] {
			if f, ok := dirs[n]; ok {
				clash, with = n, fmt.Sprintf("a file here and a directory on %s, whose %s the harvest takes", where(lists[files[f]]), f)
				break
			}
			for p := range parents(n) {
				if r, ok := files[p]; ok {
					clash, with = n, fmt.Sprintf("below %s, a file on %s, which the harvest takes", p, where(lists[r]))
					break
				}
			}
			if clash != "" {
				break
			}
		}
		if clash != "" {
			out[u] = func(n string) string {
				if n == clash {
					return with
				}
				return fmt.Sprintf("left out with %s, of its cache unit (%s)", clash, with)
			}
			continue
		}
		for _, n := range byUnit[u] {
			files[n] = owner[u]
			for p := range parents(n) {
				if _, ok := dirs[p]; ok {
					break
				}
				dirs[p] = n
			}
		}
	}
	return out
}

// parents yields the directories above name, the nearest first. It ends
// for any string (a leader's list is checked by the Writer, after choose:
// "/etc/x" yields "/etc" only).
func parents(name string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name[:i], '/') {
			if !yield(name[:i]) {
				return
			}
		}
	}
}

// where names a node as the report does: its host and first rank.
func where(l *list) string { return fmt.Sprintf("%s (rank %d)", l.Host, l.First) }

// scan compares dest with its install record: the new and changed files,
// and what it skipped.
func scan(dest string) *list {
	l := &list{Dest: dest}
	if abs, err := filepath.Abs(dest); err == nil {
		l.Dest = abs
	}
	if _, err := os.Lstat(dest); errors.Is(err, fs.ErrNotExist) {
		l.Missing = true
		return l
	}
	rec, err := bundle.ReadInstallRecord(dest)
	if err != nil {
		l.NoRecord = true
		l.Err = fmt.Sprintf("%s: %v (harvest compares a DEST that kbundle load installed with its install record)", dest, err)
		return l
	}
	l.Origin, l.Presets, l.Set = rec.Origin, rec.Presets, rec.Layers[0].Path
	// Reads since the install, told by access times: taken from each
	// file's lstat below, before anything reads it (and harvest reads
	// with O_NOATIME).
	installed, terr := time.Parse(time.RFC3339Nano, rec.Installed)
	l.Used = map[string]int64{}
	if l.UsageUnknown = usageUnknown(dest); l.UsageUnknown == "" && terr != nil {
		l.UsageUnknown = "its install record has no install time"
	}
	want := map[string]*bundle.RecordEntry{}
	for i := range rec.Entries {
		want[rec.Entries[i].Name] = &rec.Entries[i]
	}
	uid := uint32(os.Geteuid())
	var same []File // unchanged files: kept with their unit if it changed
	// A unit goes whole or not at all (X6 of the 2026-12-01b review): a
	// file of it that cannot be read leaves the unit out, else the unit
	// rule would drop the set's copy of that file.
	bad := map[string]string{} // unit → its first unreadable file
	unreadable := func(name, why string) {
		l.Skipped = append(l.Skipped, Skip{name, "unreadable: " + why})
		if u := bundle.CacheUnit(name); u != name && bad[u] == "" {
			bad[u] = name
		}
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		l.Err = err.Error()
		return l
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name != "." {
				unreadable(name, errors.Unwrap(err).Error())
				return fs.SkipDir
			}
			return err
		}
		if name == "." || name == bundle.InstalledMarker {
			return nil // the record itself: what DEST is compared with
		}
		if own(name) {
			l.Skipped = append(l.Skipped, Skip{name, "kbundle's own file"})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			unreadable(name, err.Error())
			return nil
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l.Skipped = append(l.Skipped, Skip{name, "symlink"})
			return nil
		case st != nil && st.Uid != uid:
			l.Skipped = append(l.Skipped, Skip{name, fmt.Sprintf("owned by uid %d, not you", st.Uid)})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		case fi.IsDir():
			return nil
		case !fi.Mode().IsRegular():
			l.Skipped = append(l.Skipped, Skip{name, "special file (" + fi.Mode().Type().String() + ")"})
			return nil
		}
		e := want[name]
		if e != nil && st != nil && l.UsageUnknown == "" {
			// An installed file read since (a new one is in the layer).
			if at := time.Unix(st.Atim.Unix()); at.After(installed) {
				u := bundle.CacheUnit(name)
				l.Used[u] = max(l.Used[u], at.UnixNano())
			}
		}
		if e != nil && e.Kind == bundle.KindFile && e.Size == fi.Size() && fi.ModTime().Equal(e.ModTime()) {
			// Unchanged since install (a relocated one too).
			if dig := cmpOr(e.Packed, e.Dig); bundle.CacheUnit(name) != name {
				same = append(same, File{Name: name, Size: -1, Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UnixNano(), Dig: dig, Kept: true})
			}
			return nil
		}
		f := File{Name: name, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UnixNano(), New: e == nil}
		d2, size, err := digestOf(root, name, dest, l.Origin)
		if err != nil {
			unreadable(name, err.Error())
			return nil
		}
		f.Digest, f.Size, f.Dig = d2, size, bundle.FormatDigest(d2)
		if e != nil && (f.Dig == e.Dig || f.Dig == e.Packed) {
			if bundle.CacheUnit(name) != name {
				f.Kept = true
				same = append(same, f)
			}
			return nil // same bytes (after relocation undone)
		}
		l.Files = append(l.Files, f)
		return nil
	})
	if err != nil {
		l.Err = fmt.Sprintf("cannot read %s: %v", dest, err)
	}
	// A unit goes whole: its unchanged files join a changed unit.
	changed := map[string]bool{}
	for _, f := range l.Files {
		changed[bundle.CacheUnit(f.Name)] = true
	}
	for _, f := range same {
		if !changed[bundle.CacheUnit(f.Name)] {
			continue
		}
		if f.Size < 0 { // not read yet
			d, size, err := digestOf(root, f.Name, dest, l.Origin)
			if err != nil {
				unreadable(f.Name, err.Error())
				continue
			}
			f.Digest, f.Size, f.Dig = d, size, bundle.FormatDigest(d)
		}
		l.Files = append(l.Files, f)
	}
	if len(bad) > 0 {
		kept := l.Files[:0]
		for _, f := range l.Files {
			if bad[bundle.CacheUnit(f.Name)] == "" {
				kept = append(kept, f)
			}
		}
		l.Files = kept
		for _, u := range slices.Sorted(maps.Keys(bad)) {
			if changed[u] {
				l.Skipped = append(l.Skipped, Skip{u, "cache unit left out whole: its file " + bad[u] + " is unreadable, and a unit comes whole from one layer"})
			}
		}
	}
	return l
}

// statfs is unix.Statfs; tests replace it to simulate a noatime mount.
var statfs = unix.Statfs

// usageUnknown says why reads of dest's files cannot be told by their
// access times ("": they can): a noatime mount never updates them.
// relatime updates an access time not later than the mtime (extraction
// sets it to the mtime) or a day old, strictatime every one.
func usageUnknown(dest string) string {
	var st unix.Statfs_t
	if err := statfs(dest, &st); err != nil {
		return "cannot tell how DEST is mounted: " + err.Error()
	}
	if st.Flags&unix.ST_NOATIME != 0 {
		return "DEST is mounted noatime"
	}
	return ""
}

// jobUses is what the job's reads say: each unit read on any node, at
// its newest access time (at most now). Where a node could not tell,
// every unit of the set (units) counts as used now, Unknown. It fills
// sum's UnitsUsed and UsageUnknown.
func jobUses(sum *Summary, lists []*list, units []string, now time.Time) map[string]bundle.Use {
	uses := map[string]bundle.Use{}
	for _, l := range lists {
		for u, ns := range l.Used {
			t := time.Unix(0, ns)
			if t.After(now) {
				t = now // a node's clock ahead of rank 0's
			}
			if old, ok := uses[u]; !ok || t.After(old.Time) {
				uses[u] = bundle.Use{Time: t}
			}
		}
		if l.UsageUnknown != "" {
			sum.UsageUnknown = append(sum.UsageUnknown, l.Host)
		}
	}
	sum.UnitsUsed = len(uses)
	if len(sum.UsageUnknown) > 0 {
		for _, u := range units {
			uses[u] = bundle.Use{Time: now, Unknown: true}
		}
	}
	return uses
}

// settle is rank 0's last step, once the layer (if any) is published:
// it records the job's use of the set's units and, with MaxSize, prunes
// the set when its merged view passes the limit: not when some node
// could not tell what the job read, nor when the use could not be
// recorded (never on missing data). A dry run writes nothing and says
// what pruning would drop. What goes wrong here is said in the summary
// (PruneNote): the layer is published whatever it does.
func settle(ctx context.Context, plan Plan, sum *Summary, lists []*list, choice [][]int, uses map[string]bundle.Use, now time.Time) {
	if plan.DryRun {
		if plan.MaxSize > 0 {
			dryPrune(plan, sum, lists, choice, uses, now)
		}
		return
	}
	p, err := bundle.WriteUseRecord(ctx, plan.Bundle, &bundle.UseRecord{By: "harvest", Job: plan.Job, Host: plan.Host, Units: uses})
	if err != nil {
		sum.PruneNote = fmt.Sprintf("the use of %d cache units was not recorded: %v", len(uses), err)
		return
	}
	sum.UseRecord = p
	if plan.MaxSize <= 0 {
		return
	}
	s, err := bundle.OpenSet(plan.Bundle, &bundle.OpenOptions{Trusted: true, Trust: plan.Trust})
	if errors.Is(err, bundle.ErrNoSet) || errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		sum.PruneNote = "not pruned: " + err.Error()
		return
	}
	sum.SetBytes = s.RawSize(bundle.CacheUnit)
	s.Close()
	if sum.SetBytes <= plan.MaxSize {
		return
	}
	if len(sum.UsageUnknown) > 0 {
		sum.PruneNote = unknownNote(sum)
		return
	}
	res, err := bundle.MergeSet(ctx, plan.Bundle, &bundle.MergeOptions{
		LayerOptions: bundle.LayerOptions{Writer: plan.Writer, Trust: plan.Trust},
		Open:         &bundle.OpenOptions{Trusted: true, Trust: plan.Trust},
		Unit:         bundle.CacheUnit, MaxSize: plan.MaxSize,
	})
	if err != nil {
		sum.PruneNote = "pruning failed: " + err.Error()
		return
	}
	sum.Prune, sum.Folded, sum.SetBytes, sum.UsesSkipped = res.Prune, res.Folded, res.Prune.After, res.UsesSkipped
}

func unknownNote(sum *Summary) string {
	return fmt.Sprintf("not pruned: what the job read is unknown on %s (DEST mounted noatime)", hostlist.Format(sum.UsageUnknown))
}

// dryPrune says what settle's pruning would drop: the set as it is,
// with the job's uses and the units this harvest would write (as of
// now, whole) in place of theirs.
func dryPrune(plan Plan, sum *Summary, lists []*list, choice [][]int, uses map[string]bundle.Use, now time.Time) {
	var units []bundle.Unit
	s, err := bundle.OpenSet(plan.Bundle, &bundle.OpenOptions{Trust: plan.Trust})
	switch {
	case err == nil:
		defer s.Close()
		su, err := bundle.ReadUses(plan.Bundle, plan.Trust)
		if err != nil {
			sum.PruneNote = "not pruned: " + err.Error()
			return
		}
		for u, v := range uses {
			if old, ok := su.Units[u]; !ok || v.Time.After(old.Time) {
				su.Units[u] = v
			}
		}
		units = s.Units(bundle.CacheUnit, su.Units)
	case !errors.Is(err, bundle.ErrNoSet) && !errors.Is(err, fs.ErrNotExist):
		sum.PruneNote = "not pruned: " + err.Error()
		return
	}
	fresh := map[string]*bundle.Unit{}
	for r, l := range lists {
		for _, i := range choice[r] {
			n := bundle.CacheUnit(l.Files[i].Name)
			if fresh[n] == nil {
				fresh[n] = &bundle.Unit{Name: n, LastUse: now}
			}
			fresh[n].Files++
			fresh[n].Bytes += l.Files[i].Size
		}
	}
	units = slices.DeleteFunc(units, func(u bundle.Unit) bool { return fresh[u.Name] != nil })
	for _, u := range fresh {
		units = append(units, *u)
	}
	p := bundle.PlanPrune(units, plan.MaxSize)
	sum.SetBytes = p.Before
	if len(p.Dropped) > 0 && len(sum.UsageUnknown) > 0 {
		sum.PruneNote = unknownNote(sum)
		return
	}
	sum.Prune = p
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// own reports whether name (slash-separated, relative to DEST) is one of
// kbundle's files: the record, temporaries, locks, bundles.
func own(name string) bool {
	base := path.Base(name)
	return name == bundle.InstalledMarker || strings.HasPrefix(base, ".kbundle-") || strings.HasSuffix(base, ".kbundle")
}

// relocated reports whether relocation rewrites the file (Triton's
// group files, which hold DEST's absolute path).
func relocated(name string) bool {
	b := path.Base(name)
	return strings.HasPrefix(b, "__grp__") && strings.HasSuffix(b, ".json")
}

// maxRelocated bounds a relocated file harvest reads into memory.
const maxRelocated = 64 << 20

// content opens name in root: its bytes as the bundle must hold them
// (relocation undone: dest replaced with origin in a group file).
func content(root *os.Root, name, dest, origin string) (io.Reader, int64, func(), error) {
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		f, err = root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	}
	if err != nil {
		return nil, 0, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w: no longer a regular file", errChanged)
	}
	if err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != uint32(os.Geteuid()) {
			// Replaced by another user's file since it was listed (a
			// directory others can write, inside DEST): never shipped.
			err = fmt.Errorf("%w: now owned by uid %d, not you", errChanged, st.Uid)
		}
	}
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	if relocated(name) && origin != "" && origin != dest && fi.Size() <= maxRelocated {
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, 0, nil, err
		}
		b = bytes.ReplaceAll(b, []byte(dest), []byte(origin))
		return bytes.NewReader(b), int64(len(b)), func() {}, nil
	}
	return f, fi.Size(), func() { f.Close() }, nil
}

func digestOf(root *os.Root, name, dest, origin string) (bundle.Digest, int64, error) {
	r, size, done, err := content(root, name, dest, origin)
	if err != nil {
		return bundle.Digest{}, 0, err
	}
	defer done()
	h := xxh3.New()
	n, err := io.Copy(h, r)
	if err == nil && n != size {
		err = fmt.Errorf("changed while read (%d bytes, %d before)", n, size)
	}
	return bundle.Digest(h.Sum128().Bytes()), size, err
}

// copyLocal adds rank 0's own file f to w.
func copyLocal(w *bundle.Writer, dest string, f File, origin string) error {
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	r, size, done, err := content(root, name(f), absDest(dest), origin)
	if err != nil {
		return err
	}
	defer done()
	if size != f.Size {
		return fmt.Errorf("%w (now %d bytes, %d when listed)", errChanged, size, f.Size)
	}
	return w.CopyFile(f.Name, fs.FileMode(f.Mode), time.Unix(0, f.Mtime), f.Size, f.Digest, r)
}

func name(f File) string { return f.Name }

func absDest(d string) string {
	if a, err := filepath.Abs(d); err == nil {
		return a
	}
	return d
}

// sendFile sends exactly f.Size bytes of f (zeros past a file that
// shrank or can no longer be read as listed: rank 0's digest check then
// fails it), in chunks, calling sent after each.
func sendFile(p P2P, plan Plan, f File, origin string, chunk int, sent func()) error {
	var r io.Reader = bytes.NewReader(nil)
	done := func() {}
	root, err := os.OpenRoot(plan.Dest)
	if err == nil {
		defer root.Close()
		var rr io.Reader
		if rr, _, done, err = content(root, f.Name, absDest(plan.Dest), origin); err == nil {
			r = rr
		}
	}
	defer done()
	buf := make([]byte, min(int64(chunk), max(f.Size, 1)))
	var msg []byte
	for left := f.Size; left > 0; {
		b := buf[:min(int64(len(buf)), left)]
		n, _ := io.ReadFull(r, b)
		clear(b[n:])
		msg = packPiece(msg, b)
		if err := broadcast.SendMsg(p, msg, 0, tagData); err != nil {
			return commErr("send "+f.Name, err)
		}
		left -= int64(len(b))
		sent()
	}
	return nil
}

// A piece of a file, leader to rank 0, is one message (broadcast.SendMsg):
// pieceZstd then one zstd frame of the piece's bytes, or pieceRaw then the
// bytes themselves where the frame would be no shorter. The pieces are at
// most Plan.Chunk bytes before compression; rank 0 checks that each
// decompresses to exactly its expected length, and the file's digest
// covers the rest (docs/WIRE.md, "Harvest").
const (
	pieceRaw  = 0
	pieceZstd = 1
	// maxPiece bounds what one piece may decompress to (a Plan.Chunk
	// larger than this is cut down to it).
	maxPiece = 64 << 20
)

var (
	pieceOnce sync.Once
	pieceEnc  *zstd.Encoder
	pieceDec  *zstd.Decoder
)

// pieceCodec returns the encoder and decoder of the pieces: zstd's fastest
// level (compressing must not slow the leaders' sends: about 0.5 GB/s a
// core), one goroutine each (EncodeAll and DecodeAll are safe for
// concurrent use).
func pieceCodec() (*zstd.Encoder, *zstd.Decoder) {
	pieceOnce.Do(func() {
		var err error
		pieceEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false), zstd.WithZeroFrames(true))
		if err == nil {
			pieceDec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
				zstd.WithDecoderMaxMemory(maxPiece), zstd.WithDecoderMaxWindow(maxPiece))
		}
		if err != nil {
			panic("harvest: zstd: " + err.Error()) // options are constant
		}
	})
	return pieceEnc, pieceDec
}

// packPiece returns the message for raw, in msg's storage.
func packPiece(msg, raw []byte) []byte {
	enc, _ := pieceCodec()
	msg = enc.EncodeAll(raw, append(msg[:0], pieceZstd))
	if len(msg) >= 1+len(raw) {
		msg = append(append(msg[:0], pieceRaw), raw...)
	}
	return msg
}

// unpackPiece returns the len(dst) bytes that message msg holds, in dst's
// storage; a message that does not hold exactly that many is an error.
func unpackPiece(dst, msg []byte) ([]byte, error) {
	want := len(dst)
	if len(msg) == 0 {
		return nil, errors.New("an empty piece")
	}
	switch msg[0] {
	case pieceRaw:
		if len(msg)-1 != want {
			return nil, fmt.Errorf("a raw piece of %d bytes, want %d", len(msg)-1, want)
		}
		return append(dst[:0], msg[1:]...), nil
	case pieceZstd:
		_, dec := pieceCodec()
		out, err := dec.DecodeAll(msg[1:], dst[:0])
		if err != nil {
			return nil, fmt.Errorf("a compressed piece: %w", err)
		}
		if len(out) != want {
			return nil, fmt.Errorf("a compressed piece of %d bytes, want %d", len(out), want)
		}
		return out, nil
	}
	return nil, fmt.Errorf("a piece of unknown kind %d", msg[0])
}

// recvPiece receives the next piece from leader r into b (len(b) bytes).
func recvPiece(p P2P, r int, b []byte) error {
	msg, err := broadcast.RecvMsg(p, r, tagData, uint64(len(b))+1)
	if err != nil {
		return err
	}
	_, err = unpackPiece(b, msg) // in b's storage: exactly len(b) bytes, or an error
	return err
}

// recvFile receives f from leader r into w. Every byte is received even
// when w failed, so that the leaders' sends complete.
func recvFile(w *bundle.Writer, p P2P, r int, f File, chunk int) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := w.CopyFile(f.Name, fs.FileMode(f.Mode), time.Unix(0, f.Mtime), f.Size, f.Digest, pr)
		pr.CloseWithError(err)
		errc <- err
	}()
	buf := make([]byte, min(int64(chunk), max(f.Size, 1)))
	var commFail error
	for left := f.Size; left > 0; {
		b := buf[:min(int64(len(buf)), left)]
		if err := recvPiece(p, r, b); err != nil {
			commFail = commErr("receive "+f.Name, err)
			break
		}
		pw.Write(b) // after a CopyFile error, the write fails and the bytes are dropped
		left -= int64(len(b))
	}
	if commFail != nil {
		pw.CloseWithError(commFail)
		<-errc
		return commFail
	}
	pw.Close()
	return <-errc
}

// drain receives and drops the files chosen from the leaders (all but
// rank 0's own), so that their sends complete.
func drain(p P2P, lists []*list, choice [][]int, chunk int) error {
	for r := 1; r < len(lists); r++ {
		for _, i := range choice[r] {
			f := lists[r].Files[i]
			buf := make([]byte, min(int64(chunk), max(f.Size, 1)))
			for left := f.Size; left > 0; {
				b := buf[:min(int64(len(buf)), left)]
				if err := recvPiece(p, r, b); err != nil {
					return commErr("receive "+f.Name, err)
				}
				left -= int64(len(b))
			}
		}
	}
	return nil
}

func sendChoice(p P2P, r int, choice []int, origin string) error {
	if choice == nil {
		choice = []int{}
	}
	b, _ := json.Marshal(choice)
	if err := broadcast.SendMsg(p, b, r, tagChoice); err != nil {
		return commErr("send the choice", err)
	}
	if err := broadcast.SendMsg(p, []byte(origin), r, tagChoice); err != nil {
		return commErr("send the origin", err)
	}
	return nil
}

// sendMsg sends a length, then the bytes.
// maxMsg bounds a list or choice message.
const maxMsg = 1 << 30

func commErr(what string, err error) error {
	return fmt.Errorf("%w: harvest: %s: %w", broadcast.ErrComm, what, err)
}
