// Package load is a collective load of a kbundle bundle into node-local
// storage: what `kbundle load` does, as a library for Go programs and for
// the Python binding. Rank 0 opens the bundle once (trust checked on the
// descriptor) and streams it to one leader rank per node; each leader
// decodes and writes every segment as it arrives into a private temporary
// sibling of the destination, applies the presets' relocation there, and
// then every rank agrees: the trees are installed on every node, or on
// none (a node whose install fails makes the others roll back). Every rank
// returns the same outcome; a failure names the hosts and ranks where it
// happened.
//
// The package reads no environment variable and probes no host: the
// caller passes the host name, the host description and the presets in a
// Plan.
package load

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
)

// A Plan says what Run loads and where.
type Plan struct {
	// Bundle is the bundle file; only rank 0's value is used.
	Bundle string
	// Dest is the node-local destination directory (required). It need
	// not be the same path on every node.
	Dest string
	// Force replaces a non-empty Dest.
	Force bool
	// Parents creates Dest's missing parent directories; without it a
	// missing one fails the load (bundle.ErrNoParent), naming it.
	Parents bool
	// AllowMissing: when no set exists at Bundle (no base, no layer
	// directory), every node installs an empty Dest with an install
	// record instead of failing, and Summary.Missing says so: a first job
	// runs cold, and its harvest writes the set.
	AllowMissing bool
	// GuessableDest says Dest is a default name that other users can
	// guess (Dest's: the user's name and the job id). Each leader makes
	// Dest (empty, 0700) first, before anything shows the name, so that
	// nobody else can make it during the load; a failed load removes it.
	// When another user holds it on some node (a directory, file or
	// symlink of theirs, made in advance to deny the load), every node
	// loads into Dest + "-" + 16 hex digits rank 0 draws at random
	// instead, and Summary.Taken says so; without it such a load fails, as
	// for any other Dest that is not ours.
	GuessableDest bool
	// Jobs is the number of extraction workers per leader; 0: all cores.
	Jobs int
	// ChunkSize is the size of each broadcast; 0: broadcast.DefaultChunkSize.
	ChunkSize int64
	// Window bounds the bundle bytes a leader holds while extracting; 0:
	// bundle.DefaultWindow.
	Window int64
	// Presets are applied to every node's copy before it is installed
	// (path relocation) and give Summary.Env. UseRecorded adds the
	// presets recorded in the bundle at warm-up, first (preset.Choose);
	// without it only Presets apply.
	Presets     []*preset.Preset
	UseRecorded bool
	// Progress, when set, is called on the world's rank 0 only, as its
	// node's copy is written: the bytes of content written so far and
	// the total, of each bundle of the set in turn (bundle.ExtractOptions'
	// Progress). Rank 0's node stands for the others: they all receive
	// the same stream at the same pace.
	Progress func(done, total int64)
	// Host names this node in messages (os.Hostname, given by the caller).
	Host string
	// HostInfo describes this node (hostinfo.Collect, given by the caller),
	// called once on leaders only: after a successful staging, to compare
	// the node with the warm-up machine, or before the staging when the
	// set holds entries of GPU architectures and GPUArch is "" (its
	// gpu.compute_cap). nil: no comparison, no GPU known.
	HostInfo func() map[string]string
	// Toolchain reads this node's toolchain (hostinfo.Toolchain, given by
	// the caller: the keys of bundle.MetaPython and the others asked, the
	// ones the bundle records and the presets' rules compare), on leaders
	// after a successful staging. Its error says why Python could not be
	// asked. nil: the toolchain is not compared.
	Toolchain func(keys []string) (map[string]string, error)
	// GPUArch is the GPU architecture (preset.ParseGPUArch's form,
	// "cuda:90") whose entries this node installs, leaving out those of
	// other architectures; "" the node's GPU's (HostInfo), or every
	// architecture when it sees none; preset.AllGPUArchs every
	// architecture.
	GPUArch string
	// BorrowNodeCPUs lets each leader extract on the CPUs of all its
	// node's ranks (the union of their affinity masks), which wait idle
	// meanwhile. It changes the process's thread affinity and GOMAXPROCS
	// during the extraction and restores them.
	BorrowNodeCPUs bool
	// Trust adds the owners and groups the trust checks of the bundle (on
	// rank 0) and of each Dest's parent accept besides the user and root
	// (nil: none).
	Trust *bundle.TrustPolicy
	// Job is the job id the install record names ("": none).
	Job string
	// RanksPerNode, when above 0, makes every RanksPerNode consecutive
	// ranks one "node" instead of splitting by shared memory, with Dest
	// suffixed ".node<k>": the multi-node path on one machine, for tests.
	RanksPerNode int
	// Placement is what the caller's ranks agreed of a Placed world's
	// placement in a collective of their own (broadcast.Placement): Run
	// then does not ask. It must be the same on every rank (ranks that
	// differ would call different collectives). The zero value: it asks,
	// when the world is Placed.
	Placement broadcast.Placement
}

// Summary says what Run did. Fields marked "leaders" are set on node
// leaders only; Env is set on every rank; the rest is the same everywhere.
type Summary struct {
	Dest     string // this rank's node's destination
	Bundle   string // rank 0: the bundle file
	Entries  int
	Bytes    int64 // bundle size
	RawBytes int64 // size of the files, unpacked
	Nodes    int
	Ranks    int
	Leader   bool     // this rank extracted for its node
	Presets  []string // presets applied
	// EmptyPresets (leaders) are the presets asked for by name whose
	// directories the bundle has nothing in: their variables point at
	// nothing.
	EmptyPresets []string
	Env          []string // NAME=VALUE pairs pointing the presets' frameworks at Dest
	// Read is rank 0's time reading the bundle; Bcast the whole stream;
	// Extract the longest leader's staging (decode and write), all three
	// overlapping; Total the whole call.
	Read, Bcast, Extract, Total time.Duration
	// MismatchNodes is how many nodes differ from the warm-up machine in a
	// way that makes the presets' caches miss (docs/presets.md, "What a
	// load compares"); Misses (leaders) says how this one differs, by
	// preset's reuse rules, and MismatchKeys the same as "key: warmed on X, here
	// Y" items.
	MismatchNodes int
	MismatchKeys  []string
	// Notes (rank 0) are the nodes' notes, in rank order: every node that
	// differs from the warm-up machine, with how (when the communicator
	// has point-to-point messages; else rank 0's own only).
	Notes  []NodeNote
	Misses []preset.Miss
	// ToolchainError (leaders) says why Python could not be asked for its
	// versions; NotHere (leaders) are the toolchain keys the bundle records
	// and the presets compare that this node has none of (a package not
	// installed for PythonPath, the interpreter asked), each as "triton
	// 3.6.0" (what the warm-up had); UnknownNodes is
	// how many nodes could not compare something so.
	ToolchainError string
	NotHere        []string
	PythonPath     string
	UnknownNodes   int
	// GPUArch (leaders) is the architecture this node's entries were
	// filtered for (Plan.GPUArch or its GPU's; "" when it saw no GPU and
	// installed every architecture). Skipped and SkippedBytes (leaders)
	// are what the filter left out, SkippedArchs of which architectures;
	// SkippedNodes is how many nodes left something out, AllArchNodes how
	// many saw no GPU while the set holds entries of GPU architectures.
	GPUArch      string
	Skipped      int
	SkippedBytes int64
	SkippedArchs []string
	SkippedNodes int
	AllArchNodes int
	// Held is the most bundle bytes this leader held in memory at once.
	Held int64
	// Taken is Plan.Dest when another user held it on TakenNodes nodes
	// and Dest is the unguessable name used instead (Plan.GuessableDest).
	Taken      string
	TakenNodes int
	// ContentDigest is the set's content digest, "xxh3-128:..."
	// (docs/FORMAT.md, "Content digest").
	ContentDigest string
	// AlreadyInstalled (leaders): this node's Dest already held the set,
	// unchanged since its install, and was left as it was;
	// InstalledNodes is how many nodes did.
	AlreadyInstalled bool
	InstalledNodes   int
	// Missing: no set existed at Bundle (Plan.AllowMissing), and Dest is
	// an empty cache.
	Missing bool
}

// Run loads plan.Bundle on every rank of world; it is collective. On
// success every rank gets a Summary; on failure every rank gets an equal
// *broadcast.Error, naming the failing nodes (host and ranks) and their
// reasons, and no node keeps a new Dest. A bundle that cannot be used
// matches broadcast.ErrNoBundle; a node-local failure (destination
// unwritable, disk full) does not. An error matching broadcast.ErrComm is
// local (the communicator failed).
func Run(ctx context.Context, world broadcast.NodeComm, plan Plan) (_ *Summary, err error) {
	start := time.Now()
	if ctx == nil {
		ctx = context.Background()
	}
	if world == nil {
		return nil, errors.New("load: nil communicator")
	}
	if plan.Dest == "" {
		return nil, errors.New("load: no destination directory")
	}
	nodes, err := broadcast.SplitNodes(world, plan.RanksPerNode, plan.Placement)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", broadcast.ErrComm, err)
	}
	defer nodes.Free()
	node, group := nodes.Node, nodes.Leaders
	base := plan.Dest
	plan.Dest = nodes.Dest(base)
	l := &leader{plan: plan, world: world, nodes: nodes, sum: &Summary{Dest: plan.Dest, Ranks: world.Size(), Leader: nodes.Leader, Nodes: nodes.Count}}
	if plan.GuessableDest {
		if err := l.avoidTaken(base); err != nil {
			return nil, err
		}
		defer l.unclaim() // removed if nothing was installed (or it was rolled back)
	}
	restore := func() {}
	if plan.BorrowNodeCPUs {
		set, err := nodeCPUs(node)
		if err != nil {
			return nil, commErr("node CPUs", err)
		}
		if l.sum.Leader {
			restore = borrowCPUs(set)
		}
	}

	// Leaders stream and stage; the other ranks of each node wait without
	// spinning.
	var local error
	if l.sum.Leader {
		local = l.stage(ctx, group)
		if local != nil && errors.Is(local, broadcast.ErrComm) {
			restore()
			l.abort()
			return nil, local
		}
	}
	restore()
	// The ranks that do not lead wait here, without spinning (the
	// world's Barrier may sleep: mpi.Comm.IdleBarrier), not in agree's
	// all-reduce. Where every rank leads, none waits for long: agree
	// alone meets them (issue 31).
	if nodes.Count < world.Size() {
		if err := world.Barrier(); err != nil {
			l.abort()
			return nil, commErr("barrier", err)
		}
	}
	if err := l.agreeStaging(local); err != nil {
		l.abort()
		return nil, err
	}
	if err := l.install(); err != nil {
		return nil, err
	}
	if err := l.tell(group); err != nil {
		return nil, err
	}
	l.sum.Total = time.Since(start)
	return l.sum, nil
}

// install installs every node's staged copy, or rolls back everywhere:
// collective, after every node staged.
func (l *leader) install() error {
	var local error
	if l.staged != nil {
		local = l.staged.Install()
		if local != nil {
			local = l.describe(local)
		}
	}
	l.counts = l.nodeCounts()
	if err := l.agree(local, l.counts[:], mpi.Sum); err != nil {
		l.abort()
		return err
	}
	if l.staged != nil {
		l.staged.Commit() // the old tree, if any, is gone or will be removed as stale
	}
	return nil
}

// tell gives every rank the load's summary after the install: the
// leaders' notes (gathered over group), rank 0's summary, which nodes
// held the set already, and the presets' environment for Dest.
func (l *leader) tell(group broadcast.NodeComm) error {
	if err := l.share(); err != nil {
		return err
	}
	if l.sum.Leader {
		if err := l.gatherNotes(group); err != nil { // after share: it counts the nodes with notes
			return err
		}
	}
	env, err := preset.EnvFor(l.sum.Dest, l.presets...)
	if err != nil {
		return err
	}
	l.sum.Env = env
	return nil
}

// leader carries one rank's part of a Run.
type leader struct {
	plan        Plan
	world       broadcast.NodeComm
	nodes       *broadcast.Nodes // this rank's node, its ranks and its fake-node DEST
	sum         *Summary
	staged      *bundle.Staged
	madeDest    bool // avoidTaken made (claimed) the empty Dest
	presets     []*preset.Preset
	stats       broadcast.Stats
	extract     time.Duration
	most        maxima            // the summary's figures, from the staging's agreement
	counts      nodeCounts        // and its node counts, from the install's
	bundlePath  string            // rank 0's bundle, absolute, for the install record
	layerPaths  []string          // the set's layers above its base, in order
	content     bundle.Digest     // the set's content digest, from rank 0
	setPresets  string            // and its presets' names, from its set check
	setSeen     bool              // which this rank got
	baseStatus  []byte            // the base's stream status, from the set check
	basePrelude []byte            // rank 0: the base's prelude (broadcast.Announce)
	fileBad     bool              // rank 0: what it read of its own file failed (verdict)
	sameFile    bool              // another leader: its failure was to use that stream
	info        map[string]string // HostInfo's, once infoDone
	infoDone    bool
	// gpuUnits: the set holds entries of GPU architectures (rank 0's
	// setInfo); skip is this node's filter (nil: none), skippedArchs what
	// it left out; allArchs: it saw no GPU and installs every one.
	gpuUnits     bool
	skip         func(name string) bool
	skippedArchs map[string]bool
	allArchs     bool
}

// abort rolls this node's copy back, if any.
func (l *leader) abort() {
	if l.staged != nil {
		l.staged.Abort()
	}
}

// describe names this node and its ranks in err.
func (l *leader) describe(err error) error {
	ranks := "rank " + strconv.Itoa(l.nodes.First)
	if l.nodes.Last > l.nodes.First {
		ranks = fmt.Sprintf("ranks %d-%d", l.nodes.First, l.nodes.Last)
	}
	host := l.plan.Host
	if host == "" {
		host = "node"
	}
	return &nodeError{where: host + " (" + ranks + ")", err: err}
}

type nodeError struct {
	where string
	err   error
}

func (e *nodeError) Error() string { return e.where + ": " + e.err.Error() }
func (e *nodeError) Unwrap() error { return e.err }

// sink is a leader's broadcast.Sink for the set's bundles, base first,
// one Stream call each: the base's bundle.Stream is staged in a goroutine
// as its body arrives, and each layer's stream is handed to that staging
// (ExtractOptions.Layers) once the ones before it are extracted.
type sink struct {
	l      *leader
	ctx    context.Context
	keep   *bundle.ReadCloser // rank 0: the bundle file, which --force must not delete
	s      *bundle.Stream     // the base's
	cur    *bundle.Stream     // the bundle being received
	layer  int                // its number: 0 the base
	next   chan *bundle.Stream
	staged chan error
	// discard: this node already holds the set (rank 0 streams for the
	// others): the body is read and sent, not staged.
	discard bool
}

// errNotStaged: a layer arrives after its base failed; the first failure
// is the one reported.
var errNotStaged = errors.New("the set's base was not staged")

func (k *sink) Begin(prelude []byte, size int64, _ bundle.Digest) error {
	k.cur = nil
	if k.discard {
		return nil
	}
	l := k.l
	name := l.plan.Bundle
	if k.layer > 0 {
		name = l.layerPaths[k.layer-1]
	}
	s, err := bundle.NewStream(name, prelude, size, &bundle.StreamOptions{Window: l.plan.Window})
	if err != nil {
		return fmt.Errorf("%w: %w", broadcast.ErrNoBundle, err)
	}
	if k.layer > 0 {
		if k.s == nil {
			return errNotStaged
		}
		k.cur = s
		l.sum.Bytes += s.Size()
		k.next <- s
		return nil
	}
	l.sum.Entries = len(s.Entries())
	l.sum.Bytes, l.sum.RawBytes = s.Size(), s.RawSize()
	presets, err := l.choosePresets(s.Meta())
	if err != nil {
		return fmt.Errorf("%w: %w", broadcast.ErrNoBundle, err) // a preset of a newer kbundle
	}
	l.presets = presets
	if l.plan.Presets != nil {
		// Asked for by name: say which have nothing in this bundle.
		missing, _ := preset.MissingContent(s, presets)
		l.sum.EmptyPresets = strings.Split(preset.Names(missing), ",")
		if len(missing) == 0 {
			l.sum.EmptyPresets = nil
		}
	}
	// From here on stage() closes s and waits for the staging.
	k.s, k.cur, k.staged = s, s, make(chan error, 1)
	go k.stage(presets)
	return nil
}

// stage stages the base and the layers, relocates, and reports.
func (k *sink) stage(presets []*preset.Preset) {
	l, s := k.l, k.s
	t := time.Now()
	var lay *bundle.Stream // the layer being extracted
	i := 0
	layers := func() (*bundle.Reader, string, error) {
		var ok bool
		if lay, ok = <-k.next; !ok {
			lay = nil
			return nil, "", nil
		}
		i++
		return lay.Reader, l.layerPaths[i-1], nil
	}
	var progress func(done, total int64)
	if l.world.Rank() == 0 {
		progress = l.plan.Progress
	}
	st, err := s.Stage(k.ctx, l.plan.Dest, &bundle.ExtractOptions{Force: l.plan.Force, Parents: l.plan.Parents, Jobs: l.plan.Jobs, Trust: l.plan.Trust, Keep: k.keep,
		Record: l.recordInfo(presets), Layers: layers, Unit: bundle.CacheUnit, Progress: progress, Skip: l.skip})
	if err == nil {
		if err = preset.RelocateStaged(st.Dir(), st.Dest(), s.Meta()[bundle.MetaOrigin], presets...); err != nil {
			st.Abort()
			st = nil
		}
	}
	if st != nil && (len(l.layerPaths) > 0 || l.skip != nil) {
		res := st.Result() // the set's view: what was installed and what was left out
		l.sum.Entries, l.sum.RawBytes = res.Files+res.Dirs+res.Skipped, res.Bytes+res.SkippedBytes
		l.filtered(res)
	}
	l.staged = st
	l.extract = time.Since(t)
	if err != nil {
		s.CloseWithError(err) // later writes are discarded
		if lay != nil {
			lay.CloseWithError(err)
		}
		for rest := range k.next {
			rest.CloseWithError(err)
		}
	}
	k.staged <- err
}

func (k *sink) Write(p []byte) (int, error) {
	if k.cur == nil {
		return len(p), nil
	}
	return k.cur.Write(p)
}

// choosePresets returns the plan's presets, or the bundle's recorded ones.
func (l *leader) choosePresets(meta map[string]string) ([]*preset.Preset, error) {
	return preset.Choose(l.plan.Presets, !l.plan.UseRecorded, meta)
}

// stage runs the stream on a leader and stages its node's copy. The error
// is this node's, described; one matching broadcast.ErrComm is local.
func (l *leader) stage(ctx context.Context, group broadcast.NodeComm) error {
	set, srcErr := l.openSet(group)
	if set != nil && srcErr == nil {
		defer set.Close()
	}
	held, done, sub, err := l.splitHeld(group, set, srcErr)
	if done {
		return err
	}
	if sub != nil {
		defer sub.Free()
		group = sub
	}
	if err := l.gpuFilter(group, set); err != nil {
		return err
	}
	var rc *bundle.ReadCloser
	if set != nil && srcErr == nil {
		rc = set.Read[0]
	}
	k := &sink{l: l, ctx: ctx, keep: rc, discard: held, next: make(chan *bundle.Stream, len(l.layerPaths))} // rank 0 decides whether its DEST holds the bundle (S9)
	if held {
		l.heldSummary(set)
	}
	local, err := l.streamLayers(ctx, group, set, srcErr, k)
	if err != nil {
		return err
	}
	return l.verdict(ctx, group, k, local)
}

// openSet opens the set on rank 0 of group (the leaders), trusted; an
// empty one when it is missing and the plan allows it. Elsewhere it
// returns nil, nil.
func (l *leader) openSet(group broadcast.NodeComm) (set *bundle.OpenedSet, err error) {
	if group.Rank() != 0 {
		return nil, nil
	}
	t := time.Now()
	l.sum.Bundle = l.plan.Bundle
	l.bundlePath = absPath(l.plan.Bundle)
	set, err = bundle.OpenSet(l.plan.Bundle, &bundle.OpenOptions{Trusted: true, Trust: l.plan.Trust})
	if l.plan.AllowMissing && errors.Is(err, fs.ErrNotExist) {
		set, err = bundle.EmptySet(l.plan.Bundle)
		l.sum.Missing = err == nil
	}
	l.stats.Read = time.Since(t)
	return set, err
}

// splitHeld agrees over group on the nodes whose DEST holds the set
// already (checkHeld): each is left as it is, and when every node holds
// it nothing is streamed (rank 0 read the header and index only). done:
// this leader streams nothing (the set was refused somewhere, every node
// holds it, or this one does), and err is its outcome. Otherwise sub,
// when not nil, is the communicator of the nodes the set streams to,
// split off group, for the caller to free.
func (l *leader) splitHeld(group broadcast.NodeComm, set *bundle.OpenedSet, srcErr error) (held, done bool, sub broadcast.NodeComm, err error) {
	held, refuse, err := l.checkHeld(group, set, srcErr)
	if err != nil {
		return false, true, nil, err
	}
	counts := []int64{flag(held), flag(refuse != nil)} // nodes that hold the set, nodes that refuse it
	if err := broadcast.AllreduceInts(group, counts, mpi.Sum); err != nil {
		return held, true, nil, commErr("set check", err)
	}
	switch {
	case counts[1] > 0: // refused somewhere: nothing streams, nothing changes anywhere
		if refuse != nil {
			return held, true, nil, l.describe(refuse)
		}
		return held, true, nil, nil
	case counts[0] == int64(group.Size()):
		l.heldSummary(set)
		return held, true, nil, nil
	case counts[0] > 0:
		// Rank 0 streams to the nodes that need the set; the others wait.
		color := 0
		if held && group.Rank() != 0 {
			color = 1
		}
		sub, err := group.Split(color, group.Rank())
		if err != nil {
			return held, true, nil, commErr("split the nodes to load", err)
		}
		if color == 1 {
			sub.Free()
			l.sum.AlreadyInstalled = true
			return held, true, nil, nil
		}
		return held, false, sub, nil
	}
	return held, false, nil, nil
}

// streamLayers streams the base, then each layer: one stream each
// (docs/WIRE.md), into k, and waits for the staging. local is this
// node's failure; err, rank 0's announced failure (the same on every
// leader) or ErrComm, ends the stage as it is.
func (l *leader) streamLayers(ctx context.Context, group broadcast.NodeComm, set *bundle.OpenedSet, srcErr error, k *sink) (local, err error) {
	var cerr error
	for i := 0; i <= len(l.layerPaths); i++ {
		var src *bundle.Reader
		if set != nil {
			src = set.Read[i].Reader
		}
		k.layer = i
		var loc error
		if i == 0 { // its status came with the set check
			loc, err = broadcast.StreamAnnounced(group, l.baseStatus, src, l.basePrelude, k, &l.stats)
			l.basePrelude = nil
		} else {
			loc, err = broadcast.Stream(group, src, srcErr, l.plan.ChunkSize, k, &l.stats)
		}
		if err != nil {
			close(k.next)
			if k.s != nil {
				k.s.CloseWithError(err)
				<-k.staged
				l.abort()
			}
			return nil, err
		}
		if local == nil && loc != errNotStaged {
			local = loc
		}
		if k.cur != nil {
			if err := k.cur.Close(); err != nil && cerr == nil {
				cerr = err
			}
		}
	}
	close(k.next)
	if k.s != nil {
		serr := <-k.staged
		switch {
		case local != nil:
		case serr != nil:
			local = serr
		case cerr != nil && group.Rank() == 0: // what rank 0 read from the file itself
			local = fmt.Errorf("%w: %s: %w", broadcast.ErrNoBundle, l.plan.Bundle, cerr)
		case cerr != nil:
			local = fmt.Errorf("%w: %w: %w", broadcast.ErrNoBundle, broadcast.ErrTransfer, cerr)
		}
		l.sum.Held = k.s.Held()
	}
	return local, nil
}

// verdict ends a stage that streamed: with local nil, the host check;
// otherwise the staging is undone and the failure said once. What rank
// 0 read and decoded itself failing means the file is bad: that is one
// failure, said once for the file, not once per node. Whether it was
// rides on the staging's agreement (fileBad, agreeStaging), not on a
// collective of its own (issue 31); a leader's failure to use the
// stream is then left out (sameFile).
func (l *leader) verdict(ctx context.Context, group broadcast.NodeComm, k *sink, local error) error {
	if local == nil {
		return l.checkHost(k)
	}
	if bundle.Unusable(local) && !errors.Is(local, broadcast.ErrNoBundle) {
		local = fmt.Errorf("%w: %w", broadcast.ErrNoBundle, local)
	}
	l.abort()
	l.staged = nil
	fileErr := errors.Is(local, broadcast.ErrNoBundle) // before the cause replaces it
	if cause := context.Cause(ctx); cause != nil && errors.Is(local, context.Canceled) {
		local = cause // why: a signal, say, rather than "context canceled"
	}
	if fileErr {
		if group.Rank() == 0 {
			l.fileBad = true
			return local
		}
		l.sameFile = true
	}
	return l.describe(local)
}

// agreeStaging is the staging's agreement: every rank's failure flag,
// the summary's maxima (l.most) and whether rank 0's own file was bad go
// in one all-reduce (max); only on the way to an error does it take the
// failing ranks' count and reasons (broadcast.Agree), without the nodes'
// failures to use a file rank 0 found bad.
func (l *leader) agreeStaging(local error) error {
	l.most = l.maxima()
	v := append([]int64{flag(local != nil)}, l.most[:]...)
	if err := broadcast.AllreduceInts(l.world, v, mpi.Max); err != nil {
		return commErr("agreement", err)
	}
	copy(l.most[:], v[1:])
	if v[0] == 0 {
		return nil
	}
	if l.most[8] == 1 && l.sameFile {
		local = nil // rank 0's failure fails the load everywhere
	}
	return l.agree(local, nil, mpi.Sum)
}

// heldSummary fills the summary of a node that keeps its DEST: rank 0
// counts from the set's index (the others get it from share).
func (l *leader) heldSummary(set *bundle.OpenedSet) {
	l.sum.AlreadyInstalled = true
	if set == nil {
		return
	}
	l.sum.Entries, l.sum.Bytes, l.sum.RawBytes = 0, 0, 0
	for _, r := range set.Read {
		l.sum.Bytes += r.Size()
	}
	for _, e := range set.Merged(bundle.CacheUnit) {
		l.sum.Entries++
		l.sum.RawBytes += e.Size
	}
}

// avoidTaken claims Dest on every leader and moves the load to an
// unguessable sibling of base, the same on every node, when another user
// holds Dest on some node (W6). Rank 0 draws the name; nobody could have
// made it in advance.
//
// The claim (Dest made now, empty and private) comes before anything
// shows the name in a directory others can list (the staging's temporary
// sibling): once it is ours, nobody else can make it during the load (S4
// of the 2026-12-01 review: then the install failed). The install
// replaces it (rename(2) replaces an empty directory); a failed load
// removes it.
func (l *leader) avoidTaken(base string) (err error) {
	var taken int64
	if l.sum.Leader {
		mkErr := bundle.ClaimDir(l.plan.Dest)
		switch {
		case mkErr == nil:
			l.madeDest = true
		case errors.Is(mkErr, fs.ErrExist) && takenByOther(l.plan.Dest):
			taken = 1
		}
		// Any other error (a missing parent, which Stage makes, private;
		// one we cannot write) is Stage's to report.
	}
	defer func() {
		if err != nil {
			l.unclaim()
		}
	}()
	n, err := l.world.AllreduceInt64(taken, mpi.Sum)
	if err != nil {
		return commErr("destination check", err)
	}
	if n == 0 {
		return nil
	}
	buf := make([]byte, 8)
	if l.world.Rank() == 0 {
		rand.Read(buf)
	}
	if err := l.world.Bcast(buf, 0); err != nil {
		return commErr("destination check", err)
	}
	l.unclaim() // not used: nothing is left under the guessable name
	l.sum.Taken, l.sum.TakenNodes = l.plan.Dest, int(n)
	l.plan.Dest = l.nodes.Dest(base + "-" + hex.EncodeToString(buf))
	l.sum.Dest = l.plan.Dest
	if l.sum.Leader && bundle.ClaimDir(l.plan.Dest) == nil {
		l.madeDest = true
	}
	return nil
}

// unclaim removes the Dest avoidTaken made, if it is still empty, and
// forgets it (after an install it holds the tree, and stays).
func (l *leader) unclaim() {
	if l.madeDest {
		bundle.ReleaseClaim(l.plan.Dest)
		l.madeDest = false
	}
}

// takenByOther reports whether dest exists and is not the caller's.
func takenByOther(dest string) bool {
	fi, err := os.Lstat(dest)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) != os.Geteuid()
}

func commErr(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", broadcast.ErrComm, what, err)
}

// Dest returns the default node-local destination for a job: under tmp
// (the caller's $TMPDIR, else /tmp), named for the user and the job, so
// that the application's later launch in the same job finds it.
func Dest(tmp, user, job string) string {
	if tmp == "" {
		tmp = "/tmp"
	}
	return filepath.Join(tmp, "kbundle-"+safeName(user)+"-"+safeName(job))
}

// safeName keeps a path component to letters, digits and ._-.
func safeName(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || b[0] == '.' {
		return "_" + string(b)
	}
	return string(b)
}
