package broadcast

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/kbundle/kbundle/bundle"
)

var (
	// ErrNoBundle: the bundle cannot be used (missing, unreadable,
	// untrusted, damaged, or damaged in transfer). Every rank gets an
	// error matching it, with the failing rank's reason; the program can
	// go on without the cache.
	ErrNoBundle = errors.New("no usable bundle")
	// ErrTransfer: a rank received bytes that do not match what rank 0
	// sent (their digest differs).
	ErrTransfer = errors.New("bundle damaged in transfer")
	// ErrComm: a collective operation failed. Unlike the others, this
	// error is local: ranks may not agree on it, and the job is usually
	// unusable after it.
	ErrComm = errors.New("communication failed")
	// ErrStatus: a status message received from another rank is not one
	// this package writes (a mismatched kbundle version, or a broken
	// transport).
	ErrStatus = errors.New("malformed status message")
)

// sentinels are the errors a status message can say the failure matches;
// bit i of the mask stands for sentinels[i]. Only ever append.
var sentinels = []error{
	ErrNoBundle,
	ErrTransfer,
	fs.ErrNotExist,
	fs.ErrPermission,
	bundle.ErrFormat,
	bundle.ErrVersion,
	bundle.ErrChecksum,
	bundle.ErrInsecurePath,
	bundle.ErrTooLarge,
	bundle.ErrUntrusted,
	bundle.ErrExist,
	context.Canceled, // a rank was interrupted (a signal, a cancelled context)
	bundle.ErrDestination,
	bundle.ErrNoSpace,
	bundle.ErrNoParent,
	bundle.ErrChanged, // a tree kbundle installed that changed since (it matches ErrExist too)
}

func maskOf(err error) uint32 {
	var m uint32
	for i, s := range sentinels {
		if errors.Is(err, s) {
			m |= 1 << i
		}
	}
	return m
}

// Error is a failure every rank agreed on: which rank it happened on
// (the lowest, if several failed), how many failed, and that rank's
// reason. It is identical on every rank and matches, with errors.Is, the
// sentinels the original error matched on its rank (ErrNoBundle,
// bundle.ErrChecksum, fs.ErrNotExist...).
type Error struct {
	Rank   int    // the failing rank (in the communicator the call was given)
	Ranks  int    // how many ranks failed
	Reason string // the failing rank's message
	// Reasons are the distinct reasons collected (Reason first), for
	// Agree with max above 1.
	Reasons []string
	mask    uint32
}

func (e *Error) Error() string {
	if e.Rank == 0 {
		return e.Reason
	}
	s := fmt.Sprintf("rank %d: %s", e.Rank, e.Reason)
	if e.Ranks > 1 {
		s += fmt.Sprintf(" (%d ranks failed)", e.Ranks)
	}
	return s
}

// Is reports whether the failure matched target on the failing rank.
func (e *Error) Is(target error) bool {
	for i, s := range sentinels {
		if e.mask&(1<<i) != 0 && target == s {
			return true
		}
	}
	return false
}

// MaxReason is the longest reason a status message carries, in bytes;
// longer ones are cut (at a UTF-8 boundary) and end in "...".
const MaxReason = 1024

// status is the fixed-size message rank 0 broadcasts before the bytes
// (and a failing rank broadcasts when ranks agree on an outcome):
//
//	magic   [4]byte  "KBs1"
//	failed  uint32   0 ok, 1 failed
//	mask    uint32   sentinels matched by the failure
//	rank    uint32   failing rank
//	ranks   uint32   number of failing ranks
//	chunk   uint64   chunk size of the broadcast that follows
//	size    uint64   bundle size in bytes
//	digest  [16]byte whole-file digest
//	rlen    uint32   reason length (<= MaxReason)
//	prelude uint64   length of the prelude (header, index, trailer) sent first
//	reason  [MaxReason]byte
//
// Integers are little-endian.
type status struct {
	failed      bool
	mask        uint32
	rank, ranks int
	chunk, size int64
	prelude     int64
	digest      bundle.Digest
	reason      string
}

const (
	statusMagic = "KBs2" // wire version 2: docs/WIRE.md
	statusHead  = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 16 + 4 + 8
	statusLen   = statusHead + MaxReason
)

// truncate cuts s to at most n bytes at a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	s = s[:n-len(mark)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + mark
}

func (s *status) encode() []byte {
	b := make([]byte, statusLen)
	copy(b, statusMagic)
	le := binary.LittleEndian
	if s.failed {
		le.PutUint32(b[4:], 1)
	}
	le.PutUint32(b[8:], s.mask)
	le.PutUint32(b[12:], uint32(s.rank))
	le.PutUint32(b[16:], uint32(s.ranks))
	le.PutUint64(b[20:], uint64(s.chunk))
	le.PutUint64(b[28:], uint64(s.size))
	copy(b[36:52], s.digest[:])
	r := truncate(s.reason, MaxReason)
	le.PutUint32(b[52:], uint32(len(r)))
	le.PutUint64(b[56:], uint64(s.prelude))
	copy(b[statusHead:], r)
	return b
}

// decodeStatus parses and checks a status message.
func decodeStatus(b []byte) (*status, error) {
	if len(b) != statusLen {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrStatus, len(b), statusLen)
	}
	if string(b[:4]) != statusMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrStatus, b[:4])
	}
	le := binary.LittleEndian
	s := &status{mask: le.Uint32(b[8:])}
	switch le.Uint32(b[4:]) {
	case 0:
	case 1:
		s.failed = true
	default:
		return nil, fmt.Errorf("%w: bad failure flag %d", ErrStatus, le.Uint32(b[4:]))
	}
	rank, ranks := le.Uint32(b[12:]), le.Uint32(b[16:])
	chunk, size := le.Uint64(b[20:]), le.Uint64(b[28:])
	rlen := le.Uint32(b[52:])
	prelude := le.Uint64(b[56:])
	switch {
	case prelude > size, size > 0 && prelude < bundle.MinPrelude:
		return nil, fmt.Errorf("%w: prelude of %d bytes in a bundle of %d", ErrStatus, prelude, size)
	case s.mask>>len(sentinels) != 0:
		return nil, fmt.Errorf("%w: unknown error bits %#x", ErrStatus, s.mask)
	case rank > 1<<30 || ranks > 1<<30:
		return nil, fmt.Errorf("%w: rank %d, ranks %d", ErrStatus, rank, ranks)
	case size > bundle.MaxDataLen:
		return nil, fmt.Errorf("%w: size %d above the format's limit", ErrStatus, size)
	case chunk > MaxChunkSize:
		return nil, fmt.Errorf("%w: chunk size %d", ErrStatus, chunk)
	case !s.failed && size > 0 && chunk == 0:
		return nil, fmt.Errorf("%w: zero chunk size", ErrStatus)
	case rlen > MaxReason:
		return nil, fmt.Errorf("%w: reason of %d bytes", ErrStatus, rlen)
	}
	s.rank, s.ranks = int(rank), int(ranks)
	s.chunk, s.size, s.prelude = int64(chunk), int64(size), int64(prelude)
	copy(s.digest[:], b[36:52])
	s.reason = strings.ToValidUTF8(string(b[statusHead:statusHead+int(rlen)]), "?")
	return s, nil
}

// failure describes err, which happened on rank, as a status.
func failure(err error, rank, ranks int, extra ...error) *status {
	m := maskOf(err)
	for _, e := range extra {
		m |= maskOf(e)
	}
	return &status{failed: true, mask: m, rank: rank, ranks: ranks, reason: err.Error()}
}

// err turns a failed status into the agreed error.
func (s *status) err() error {
	return &Error{Rank: s.rank, Ranks: s.ranks, Reason: s.reason, mask: s.mask}
}
