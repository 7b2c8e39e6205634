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

const (
	// BundleName is the bundle's file name inside a cache directory.
	BundleName = "cache.kbundle"
	// DefaultChunkSize is the size of each broadcast call: small enough
	// that reading, broadcasting and extracting overlap, large enough for
	// the network's full speed.
	DefaultChunkSize = 8 << 20
	// MaxChunkSize is the largest chunk size accepted.
	MaxChunkSize = mpi.MaxCount
	// CacheDirEnv names the cache directory whose BundleName is loaded
	// when no path is given.
	CacheDirEnv = "KBUNDLE_CACHE_DIR"
)

// Stats says where a load spent its time; WithStats asks for them. The
// durations are this rank's.
type Stats struct {
	Path   string        // the bundle file (rank 0)
	Size   int64         // bytes broadcast
	Chunks int           // broadcast calls for the bytes
	Read   time.Duration // rank 0: open the file and read it (overlaps Bcast)
	Bcast  time.Duration // the whole stream: status, prelude and body
	Check  time.Duration // parse and digest check of what was received, and agreement
}

type options struct {
	path, dir string
	chunk     int64
	stats     *Stats
	trust     *bundle.TrustPolicy
}

// An Option changes what LoadBundle does. Options only matter on rank 0
// except WithStats: rank 0 decides and tells the others.
type Option func(*options)

// WithPath loads the bundle file path.
func WithPath(path string) Option { return func(o *options) { o.path = path } }

// WithDir loads the cache directory dir's bundle, dir/cache.kbundle.
func WithDir(dir string) Option { return func(o *options) { o.dir = dir } }

// WithChunkSize sets the size of each broadcast call (1 to MaxChunkSize
// bytes) instead of DefaultChunkSize.
func WithChunkSize(n int64) Option { return func(o *options) { o.chunk = n } }

// WithTrust adds the owners and groups rank 0's trust check accepts
// besides the user and root (bundle.TrustPolicy; default none).
func WithTrust(p *bundle.TrustPolicy) Option { return func(o *options) { o.trust = p } }

// WithStats fills s with this rank's timings.
func WithStats(s *Stats) Option { return func(o *options) { o.stats = s } }

// locate returns the bundle path: WithPath, else WithDir's bundle, else
// $KBUNDLE_CACHE_DIR's bundle.
func (o *options) locate() (string, error) {
	switch {
	case o.path != "":
		return o.path, nil
	case o.dir != "":
		return filepath.Join(o.dir, BundleName), nil
	}
	// The one environment variable a library package reads: LoadBundle(comm)
	// is the in-process call of an application, which has no command line
	// to pass the cache directory through.
	if d := os.Getenv(CacheDirEnv); d != "" {
		return filepath.Join(d, BundleName), nil
	}
	return "", fmt.Errorf("no bundle given and %s is not set", CacheDirEnv)
}

// LoadBundle loads a bundle on every rank of comm; it is collective.
//
// Rank 0 locates the bundle (WithPath, WithDir, else
// $KBUNDLE_CACHE_DIR/cache.kbundle) and opens it once with its trust
// check (bundle.Open with Trusted: owner and permissions of the file and
// its directory, checked on the open descriptor), then streams it to every
// rank (Stream, docs/WIRE.md). Every rank, rank 0 included, checks what it
// holds: header, trailer, index and whole-file digest. The ranks agree on
// the outcome.
//
// On success every rank returns a reader over the same bytes (held in
// memory: each rank holds the whole bundle). If rank 0 cannot use the
// bundle, or any rank received a damaged copy, every rank returns the
// same *Error, which matches ErrNoBundle (and what the failure matched on
// its rank, such as fs.ErrNotExist, bundle.ErrUntrusted or
// bundle.ErrChecksum) and carries the failing rank's reason. An error
// matching ErrComm means the communicator itself failed; ranks may then
// disagree.
func LoadBundle(comm Comm, opts ...Option) (*bundle.Reader, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.stats == nil {
		o.stats = new(Stats)
	}
	if comm == nil {
		return nil, errors.New("broadcast: nil communicator")
	}
	var src *bundle.Reader
	var srcErr error
	if comm.Rank() == 0 {
		t := time.Now()
		var rc *bundle.ReadCloser
		rc, srcErr = openRoot(&o)
		if srcErr == nil {
			defer rc.Close()
			src = rc.Reader
		}
		o.stats.Read = time.Since(t)
	}
	if o.chunk < 0 || o.chunk > MaxChunkSize {
		return nil, fmt.Errorf("broadcast: chunk size %d not in [1, %d]", o.chunk, int64(MaxChunkSize))
	}
	sink := &memorySink{}
	local, err := Stream(comm, src, srcErr, o.chunk, sink, o.stats)
	if err != nil {
		return nil, err
	}
	t := time.Now()
	var r *bundle.Reader
	if local == nil {
		r, local = bundle.NewReaderBytes(sink.b)
		if local == nil {
			local = r.Verify(context.Background(), nil)
		}
		if local != nil {
			local = fmt.Errorf("%w: %w: %w", ErrNoBundle, ErrTransfer, local)
		}
	}
	fail, err := agree(comm, local)
	o.stats.Check = time.Since(t)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		return nil, fail
	}
	return r, nil
}

// openRoot opens the bundle on rank 0 as a loader must: located, one open,
// trust checked on the descriptor.
func openRoot(o *options) (*bundle.ReadCloser, error) {
	path, err := o.locate()
	if err != nil {
		return nil, err
	}
	o.stats.Path = path
	return bundle.Open(path, &bundle.OpenOptions{Trusted: true, Trust: o.trust})
}

func commErr(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrComm, what, err)
}

// agree makes every rank return the same outcome: nil if local is nil on
// every rank, else the lowest failing rank's error (as an *Error) on all.
func agree(comm Comm, local error) (*Error, error) {
	return Agree(comm, local, 1)
}

// Agree makes every rank of comm return the same outcome; it is
// collective. It returns nil if local is nil on every rank, else the same
// *Error on every rank: the lowest failing rank's reason and sentinels,
// with the reasons of up to max-1 other failing ranks in Reasons (in rank
// order; an identical reason is kept once) and the number of failing
// ranks. An error matching ErrComm means the communicator failed.
func Agree(comm Comm, local error, max int) (*Error, error) {
	return AgreeWith(comm, local, max, nil, mpi.Sum)
}

// AgreeWith is Agree that also combines each element of vals from every
// rank with op (mpi.Sum or mpi.Max), in place, in the agreement's first
// collective: figures a step has ready before it ends ride on its
// agreement instead of taking round trips of their own (issue 31). Where
// some rank failed, vals are unspecified.
func AgreeWith(comm Comm, local error, max int, vals []int64, op mpi.Op) (*Error, error) {
	if op != mpi.Sum && op != mpi.Max {
		return nil, fmt.Errorf("broadcast: agreement: op %v: not Sum or Max", op)
	}
	rank, size := comm.Rank(), comm.Size()
	bad := int64(0)
	if local != nil {
		bad = 1
	}
	v := append([]int64{bad}, vals...)
	if err := AllreduceInts(comm, v, op); err != nil {
		return nil, commErr("agreement", err)
	}
	n := v[0]
	copy(vals, v[1:])
	if n == 0 {
		return nil, nil
	}
	if op != mpi.Sum { // how many failed, and why: only on the way to an error
		return Agree(comm, local, max)
	}
	var out *Error
	seen := map[string]bool{}
	prev := int64(-1)
	for i := 0; i < max; i++ {
		me := int64(size)
		if local != nil && int64(rank) > prev {
			me = int64(rank)
		}
		next, err := comm.AllreduceInt64(me, mpi.Min)
		if err != nil {
			return nil, commErr("agreement", err)
		}
		if next >= int64(size) {
			break
		}
		if next < 0 {
			return nil, fmt.Errorf("%w: agreement: failing rank %d of %d", ErrStatus, next, size)
		}
		msg := make([]byte, statusLen)
		if int64(rank) == next {
			var s *status
			var e *Error
			if errors.As(local, &e) {
				s = &status{failed: true, mask: e.mask, reason: e.Reason}
			} else {
				s = failure(local, 0, 0)
			}
			s.rank, s.ranks = int(next), int(n)
			msg = s.encode()
		}
		if err := comm.Bcast(msg, int(next)); err != nil {
			return nil, commErr("agreement", err)
		}
		s, err := decodeStatus(msg)
		if err != nil {
			return nil, err
		}
		if !s.failed {
			return nil, fmt.Errorf("%w: agreement: failing rank %d sent success", ErrStatus, next)
		}
		if out == nil {
			out = s.err().(*Error)
		}
		if !seen[s.reason] {
			seen[s.reason] = true
			out.Reasons = append(out.Reasons, s.reason)
		}
		out.mask |= s.mask
		prev = next
	}
	return out, nil
}
