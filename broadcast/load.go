package broadcast

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/mpi"
)

const (
	// BundleName is the bundle's file name inside a cache directory.
	BundleName = "cache.kbundle"
	// DefaultChunkSize is the size of each broadcast call.
	DefaultChunkSize = 64 << 20
	// MaxChunkSize is the largest chunk size accepted.
	MaxChunkSize = mpi.MaxCount
	// CacheDirEnv names the cache directory whose BundleName is loaded
	// when no path is given.
	CacheDirEnv = "KBUNDLE_CACHE_DIR"
	// ChunkEnv, when set on rank 0, overrides the default chunk size in
	// bytes. It is a testing knob: small chunks exercise many broadcast
	// calls with small bundles.
	ChunkEnv = "KBUNDLE_BCAST_CHUNK"
)

// Stats says where a load spent its time; WithStats asks for them. The
// durations are this rank's.
type Stats struct {
	Path   string        // the bundle file (rank 0)
	Size   int64         // bytes broadcast
	Chunks int           // broadcast calls for the bytes
	Read   time.Duration // rank 0: open, read and check the file
	Bcast  time.Duration // status and bytes broadcast
	Check  time.Duration // parse and digest check of what was received, and agreement
}

type options struct {
	path, dir string
	chunk     int64
	stats     *Stats
	// spool, when set (LoadToNodes), is a node-local directory where a
	// receiving rank writes the bundle as it arrives instead of holding
	// it in memory; cleanup then closes and removes that file.
	spool   string
	cleanup func()
}

// An Option changes what LoadBundle does. Options only matter on rank 0
// except WithStats: rank 0 decides and tells the others.
type Option func(*options)

// WithPath loads the bundle file path.
func WithPath(path string) Option { return func(o *options) { o.path = path } }

// WithDir loads the cache directory dir's bundle, dir/cache.kbundle.
func WithDir(dir string) Option { return func(o *options) { o.dir = dir } }

// WithChunkSize sets the size of each broadcast call (1 to MaxChunkSize
// bytes), overriding $KBUNDLE_BCAST_CHUNK and DefaultChunkSize.
func WithChunkSize(n int64) Option { return func(o *options) { o.chunk = n } }

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
	if d := os.Getenv(CacheDirEnv); d != "" {
		return filepath.Join(d, BundleName), nil
	}
	return "", fmt.Errorf("no bundle given and %s is not set", CacheDirEnv)
}

func (o *options) chunkSize() (int64, error) {
	n := o.chunk
	if n == 0 {
		s := os.Getenv(ChunkEnv)
		if s == "" {
			return DefaultChunkSize, nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 {
			return 0, fmt.Errorf("%s=%q: want a positive number of bytes", ChunkEnv, s)
		}
		n = v
	}
	if n <= 0 || n > MaxChunkSize {
		return 0, fmt.Errorf("chunk size %d not in [1, %d]", n, int64(MaxChunkSize))
	}
	return n, nil
}

// LoadBundle loads a bundle on every rank of comm; it is collective.
//
// Rank 0 locates the bundle (WithPath, WithDir, else
// $KBUNDLE_CACHE_DIR/cache.kbundle) and reads it with bundle.ReadFile:
// one open, a trust check (owner and permissions of the file and its
// directory), one sequential read, and checks of the trailer, index and
// whole-file digest. It then broadcasts a fixed-size status: either the
// size and digest, or its failure and reason. The bytes follow in chunks.
// Every other rank checks what it received against the digest, and the
// ranks agree on the outcome.
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
	r, _, err := load(comm, &o)
	return r, err
}

func commErr(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrComm, what, err)
}

// load is LoadBundle; it also returns the bytes.
func load(comm Comm, o *options) (*bundle.Reader, []byte, error) {
	if comm == nil {
		return nil, nil, errors.New("broadcast: nil communicator")
	}
	rank, size := comm.Rank(), comm.Size()
	if size < 1 || rank < 0 || rank >= size {
		return nil, nil, fmt.Errorf("broadcast: rank %d of %d: not a valid communicator", rank, size)
	}
	st := o.stats

	// Rank 0 reads and checks the bundle, and decides the chunking.
	var (
		data []byte
		r    *bundle.Reader
		head *status
	)
	t := time.Now()
	if rank == 0 {
		head = readRoot(o, &data, &r)
		st.Read = time.Since(t)
		t = time.Now()
	}
	msg := make([]byte, statusLen)
	if rank == 0 {
		msg = head.encode()
	}
	if err := comm.Bcast(msg, 0); err != nil {
		return nil, nil, commErr("status broadcast", err)
	}
	head, err := decodeStatus(msg)
	if err != nil {
		return nil, nil, err
	}
	if head.failed {
		st.Bcast = time.Since(t)
		return nil, nil, head.err()
	}

	// The bytes, in chunks of rank 0's choosing: into memory, or through
	// one chunk buffer into a node-local spool file.
	var sp *spool
	if rank != 0 {
		if o.spool != "" {
			sp = newSpool(o.spool, head.chunk)
			o.cleanup = sp.remove
		} else {
			if head.size > math.MaxInt {
				return nil, nil, fmt.Errorf("%w: bundle of %d bytes does not fit in memory", ErrStatus, head.size)
			}
			data = make([]byte, head.size)
		}
	}
	st.Size = head.size
	for off := int64(0); off < head.size; off += head.chunk {
		end := min(off+head.chunk, head.size)
		var b []byte
		if sp != nil {
			b = sp.buf[:end-off]
		} else {
			b = data[off:end]
		}
		if err := comm.Bcast(b, 0); err != nil {
			return nil, nil, commErr(fmt.Sprintf("bundle broadcast at byte %d", off), err)
		}
		sp.write(b)
		st.Chunks++
	}
	st.Bcast = time.Since(t)
	t = time.Now()

	// Every receiver checks its copy; then all agree.
	var local error
	switch {
	case sp != nil:
		r, local = sp.reader(head.size, head.digest)
	case rank != 0:
		r, local = receivedReader(data, head.digest)
	}
	fail, err := agree(comm, local)
	st.Check = time.Since(t)
	if err != nil {
		return nil, nil, err
	}
	if fail != nil {
		return nil, nil, fail
	}
	return r, data, nil
}

// readRoot reads and checks the bundle on rank 0 and describes the result.
func readRoot(o *options, data *[]byte, r **bundle.Reader) *status {
	chunk, err := o.chunkSize()
	if err != nil {
		return failure(fmt.Errorf("broadcast: %w", err), 0, 1)
	}
	path, err := o.locate()
	if err != nil {
		return failure(fmt.Errorf("%w: %w", ErrNoBundle, err), 0, 1)
	}
	o.stats.Path = path
	b, err := readFile(path)
	if err == nil {
		*r, err = bundle.NewReaderBytes(b)
	}
	if err != nil {
		return failure(fmt.Errorf("%w: %w", ErrNoBundle, err), 0, 1)
	}
	*data = b
	return &status{chunk: chunk, size: int64(len(b)), digest: (*r).FileDigest()}
}

// receivedReader checks bytes received from rank 0.
func receivedReader(data []byte, want bundle.Digest) (*bundle.Reader, error) {
	r, err := bundle.NewReaderBytes(data)
	return checkReceived(r, err, want)
}

// checkReceived checks a reader over what was received from rank 0: its
// whole-file digest, and that it is the digest rank 0 announced.
func checkReceived(r *bundle.Reader, err error, want bundle.Digest) (*bundle.Reader, error) {
	if err == nil {
		err = r.Verify(context.Background(), nil)
	}
	if err == nil && r.FileDigest() != want {
		err = fmt.Errorf("%w: digest %s, rank 0 sent %s", bundle.ErrChecksum, r.FileDigest(), want)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %w", ErrNoBundle, ErrTransfer, err)
	}
	return r, nil
}

// agree makes every rank return the same outcome: nil if local is nil on
// every rank, else the lowest failing rank's error (as an *Error) on all.
func agree(comm Comm, local error) (*Error, error) {
	rank, size := comm.Rank(), comm.Size()
	bad, me := int64(0), int64(size)
	if local != nil {
		bad, me = 1, int64(rank)
	}
	n, err := comm.AllreduceInt64(bad, mpi.Sum)
	if err != nil {
		return nil, commErr("agreement", err)
	}
	if n == 0 {
		return nil, nil
	}
	first, err := comm.AllreduceInt64(me, mpi.Min)
	if err != nil {
		return nil, commErr("agreement", err)
	}
	if first < 0 || first >= int64(size) {
		return nil, fmt.Errorf("%w: agreement: failing rank %d of %d", ErrStatus, first, size)
	}
	msg := make([]byte, statusLen)
	if int64(rank) == first {
		var s *status
		var e *Error
		if errors.As(local, &e) {
			// Already agreed among a subset (the leaders): keep its reason.
			s = &status{failed: true, mask: e.mask, reason: e.Reason}
		} else {
			s = failure(local, 0, 0)
		}
		s.rank, s.ranks = int(first), int(n)
		msg = s.encode()
	}
	if err := comm.Bcast(msg, int(first)); err != nil {
		return nil, commErr("agreement", err)
	}
	s, err := decodeStatus(msg)
	if err != nil {
		return nil, err
	}
	if !s.failed {
		return nil, fmt.Errorf("%w: agreement: failing rank %d sent success", ErrStatus, first)
	}
	return s.err().(*Error), nil
}

// readFile reads the bundle at path as the loader does: one trusted open,
// one sequential read, and the whole-file digest checked.
func readFile(path string) ([]byte, error) {
	rc, err := bundle.Open(path, &bundle.OpenOptions{Trusted: true})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b := make([]byte, rc.Size())
	if _, err := io.ReadFull(io.NewSectionReader(rc.ReaderAt(), 0, rc.Size()), b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := rc.Verify(context.Background(), nil); err != nil {
		return nil, err
	}
	return b, nil
}
