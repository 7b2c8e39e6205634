package broadcast

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/mpi"
)

// NodeOptions says where and how LoadToNodes extracts.
type NodeOptions struct {
	// Dest is the node-local directory to extract into (required). Each
	// node's leader computes its own; it need not be the same path on
	// every node.
	Dest string
	// Force replaces a non-empty Dest (atomically).
	Force bool
	// Jobs is the number of extraction workers per leader; 0: all cores.
	Jobs int
	// After, when set, runs on each leader after a successful
	// extraction, such as a preset's path relocation; its error fails
	// the load like an extraction error.
	After func(dest string, r *bundle.Reader) error
	// RanksPerNode, when above 0, makes every RanksPerNode consecutive
	// ranks one "node" instead of splitting by shared memory. It exists
	// to run the multi-node path (leaders, broadcast, agreement) on one
	// machine in tests; each fake node then needs its own Dest.
	RanksPerNode int
	// BorrowNodeCPUs lets each leader extract on the CPUs of all its
	// node's ranks (the union of their affinity masks), which wait idle
	// meanwhile: a launcher that binds each rank to one core would
	// otherwise leave the leader one core. It changes the process's thread
	// affinity and GOMAXPROCS during the extraction and restores them.
	BorrowNodeCPUs bool
}

// NodeResult says what LoadToNodes did. Fields marked "leaders" are set
// on node leaders only; the others are the same on every rank.
type NodeResult struct {
	Leader  bool                  // this rank extracted for its node
	Nodes   int                   // number of nodes (leaders)
	Reader  *bundle.Reader        // leaders: the bundle (index and metadata; on leaders other than rank 0 its content was spooled and is gone once LoadToNodes returns)
	Extract *bundle.ExtractResult // leaders: what Extract did
	Stats   Stats                 // leaders: LoadBundle's timings on this rank
	// ExtractTime is the longest extraction (and After) over all leaders.
	ExtractTime time.Duration
	// Total is the time of the whole call on this rank.
	Total time.Duration
}

// LoadToNodes loads a bundle into node-local storage on every node of
// world; it is collective. The ranks split by shared-memory node; each
// node's first rank is its leader, and only the leaders take part in
// LoadBundle (so rank 0 reads the file once and the bytes cross the
// network once per node). Each leader extracts into opt.Dest atomically
// (a reader of Dest sees the old content or the whole tree, never part of
// it), runs opt.After, and the other ranks of the node wait without
// spinning. Then all ranks agree: on success each gets a NodeResult; on
// any failure every rank gets the same *Error (the lowest failing rank's
// reason, with the sentinels it matched: ErrNoBundle when the bundle was
// unusable). Errors matching ErrComm are local.
func LoadToNodes(world NodeComm, opt NodeOptions, opts ...Option) (*NodeResult, error) {
	start := time.Now()
	if world == nil {
		return nil, errors.New("broadcast: nil communicator")
	}
	if opt.Dest == "" {
		return nil, errors.New("broadcast: no destination directory")
	}
	var node NodeComm
	var err error
	if opt.RanksPerNode > 0 {
		node, err = world.Split(world.Rank()/opt.RanksPerNode, world.Rank())
	} else {
		node, err = world.SplitShared()
	}
	if err != nil {
		return nil, commErr("split by node", err)
	}
	defer node.Free()
	res := &NodeResult{Leader: node.Rank() == 0}
	color := 1
	if res.Leader {
		color = 0
	}
	group, err := world.Split(color, world.Rank())
	if err != nil {
		return nil, commErr("split leaders", err)
	}
	defer group.Free()
	nodes, err := world.AllreduceInt64(int64(1-color), mpi.Sum)
	if err != nil {
		return nil, commErr("count nodes", err)
	}
	res.Nodes = int(nodes)

	borrow := func() (restore func()) { return func() {} }
	if opt.BorrowNodeCPUs {
		set, err := nodeCPUs(node)
		if err != nil {
			return nil, commErr("node CPUs", err)
		}
		borrow = func() func() { return borrowCPUs(set) }
	}
	var local error
	var took time.Duration
	if res.Leader {
		o := options{stats: &res.Stats}
		for _, f := range opts {
			f(&o)
		}
		// Receiving leaders spool the bundle beside Dest (node-local)
		// rather than hold it in memory, when that folder exists.
		if fi, err := os.Stat(filepath.Dir(opt.Dest)); err == nil && fi.IsDir() {
			o.spool = filepath.Dir(opt.Dest)
		}
		defer func() {
			if o.cleanup != nil {
				o.cleanup()
			}
		}()
		var r *bundle.Reader
		r, _, local = load(group, &o)
		if local != nil && errors.Is(local, ErrComm) {
			return nil, local
		}
		if local == nil {
			t := time.Now()
			res.Reader = r
			restore := borrow()
			res.Extract, local = r.Extract(context.Background(), opt.Dest, &bundle.ExtractOptions{Force: opt.Force, Jobs: opt.Jobs})
			restore()
			if local == nil && opt.After != nil {
				if err := opt.After(res.Extract.Dest, r); err != nil {
					local = fmt.Errorf("after extracting to %s: %w", res.Extract.Dest, err)
				}
			}
			took = time.Since(t)
		}
	}
	// The other ranks of each node wait here for their leader.
	if err := world.Barrier(); err != nil {
		return nil, commErr("barrier", err)
	}
	fail, err := agree(world, local)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		return nil, fail
	}
	longest, err := world.AllreduceInt64(int64(took), mpi.Max)
	if err != nil {
		return nil, commErr("timings", err)
	}
	res.ExtractTime = time.Duration(longest)
	res.Total = time.Since(start)
	return res, nil
}
