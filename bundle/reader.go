package bundle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/zeebo/xxh3"

	"github.com/kbundle/kbundle/internal/readahead"
)

// A Reader reads a bundle from an io.ReaderAt. It is safe for concurrent
// use. NewReader checks the header, trailer and index (digest and every
// structural rule); contents are checked against their digests whenever
// they are read, and VerifyFileDigest or Verify check the whole file.
type Reader struct {
	r        io.ReaderAt
	size     int64
	name     string // for messages; empty for in-memory bundles
	ix       *index
	segOff   []int64 // file offset of each segment, plus the index offset
	byName   map[string]int
	children map[string][]int // directory name ("." for the root) → entries
	fileDig  Digest
	indexOff int64

	cacheMu sync.Mutex
	cache   [2]cachedSeg // the last decoded segments, for small reads
}

type cachedSeg struct {
	i    int
	data []byte
}

// ReadCloser is a Reader over a file opened by Open.
type ReadCloser struct {
	*Reader
	f         *os.File
	untrusted error
}

// Untrusted says why Open with Trusted would have refused the bundle
// (ErrUntrusted), or returns nil. Open without Trusted still walks the
// path as the trusted open does, so that commands that only read a bundle
// (info, ls, verify) can report it.
func (rc *ReadCloser) Untrusted() error { return rc.untrusted }

// Close closes the bundle file.
func (rc *ReadCloser) Close() error {
	if rc.f == nil {
		return nil // EmptySet's
	}
	return rc.f.Close()
}

// OpenOptions tune Open. The zero value is valid.
type OpenOptions struct {
	// Trusted refuses (ErrUntrusted) a bundle that someone other than the
	// current user or root could have written: the file is checked on the
	// opened descriptor, with its directory (see CheckTrust). Loading a
	// bundle for execution (extract, load) asks for it.
	Trusted bool
	// Trust adds the owners and groups the trust check accepts besides
	// you and root (nil: none), for Trusted and for Untrusted.
	Trust *TrustPolicy
}

// Open opens the bundle file name, once: every check, including trust, is
// made on the opened descriptor, and the header, trailer and index are
// read and checked before anything is allocated by their size.
func Open(name string, opt *OpenOptions) (*ReadCloser, error) {
	if opt == nil {
		opt = &OpenOptions{}
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer (a hang); the
	// file is then refused as not regular. Regular files ignore the flag.
	// Trusted: the path is opened component by component and each is
	// checked on its descriptor (OpenTrusted, trust.go).
	var f *os.File
	var err, untrusted error
	if opt.Trusted {
		f, err = OpenTrusted(name, opt.Trust)
	} else if f, untrusted, err = openTrustedPath(name, opt.Trust, false, false); err != nil && !errors.Is(err, ErrFormat) {
		f, err = os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		untrusted = nil
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &Error{File: name, Err: ErrFormat, Msg: "not a regular file"}
	}
	r, err := newReader(f, fi.Size(), name)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &ReadCloser{Reader: r, f: f, untrusted: untrusted}, nil
}

// NewReader reads a bundle of the given size from r.
func NewReader(r io.ReaderAt, size int64) (*Reader, error) { return newReader(r, size, "") }

// NewReaderBytes reads a bundle held in memory, such as one received over
// MPI. b must not change while the Reader is in use.
func NewReaderBytes(b []byte) (*Reader, error) {
	return newReader(bytes.NewReader(b), int64(len(b)), "")
}

func newReader(ra io.ReaderAt, size int64, name string) (*Reader, error) {
	r, err := parse(ra, size)
	if err != nil {
		return nil, inFile(err, name)
	}
	r.name = name
	return r, nil
}

func parse(ra io.ReaderAt, size int64) (*Reader, error) {
	if size < headerSize+trailerSize {
		if size >= 8 {
			var m [8]byte
			if _, err := ra.ReadAt(m[:], 0); err == nil && m != magic {
				return nil, errf(ErrFormat, "no kbundle magic at the start")
			}
		}
		return nil, errf(ErrFormat, "%d bytes is too short for a bundle (truncated?)", size)
	}
	var hdr [headerSize]byte
	if _, err := ra.ReadAt(hdr[:], 0); err != nil {
		return nil, err
	}
	if [8]byte(hdr[:8]) != magic {
		return nil, errf(ErrFormat, "no kbundle magic at the start")
	}
	le := binary.LittleEndian
	if v, fl, res := le.Uint16(hdr[8:]), le.Uint16(hdr[10:]), le.Uint32(hdr[12:]); v != Version || fl != 0 || res != 0 {
		return nil, errf(ErrVersion, "format version %d flags %#x (this kbundle reads version %d): upgrade kbundle or repack", v, fl, Version)
	}
	var tr [trailerSize]byte
	if _, err := ra.ReadAt(tr[:], size-trailerSize); err != nil {
		return nil, err
	}
	if [8]byte(tr[32:40]) != endMagic {
		return nil, errf(ErrFormat, "no end marker: the file is truncated or has trailing bytes")
	}
	ioff, ilen := le.Uint64(tr[0:]), le.Uint64(tr[8:])
	if ilen > MaxIndexLen {
		return nil, errf(ErrTooLarge, "index of %d bytes (limit %d)", ilen, MaxIndexLen)
	}
	if ioff < headerSize || ioff > uint64(size) || ioff+ilen != uint64(size-trailerSize) {
		return nil, errf(ErrFormat, "index at %d+%d does not end at the trailer (%d)", ioff, ilen, size-trailerSize)
	}
	ib := make([]byte, ilen)
	if _, err := ra.ReadAt(ib, int64(ioff)); err != nil {
		return nil, err
	}
	if sum(ib) != Digest(tr[16:32]) {
		return nil, errf(ErrChecksum, "index digest does not match")
	}
	raw, err := decodeIndex(ib)
	if err != nil {
		return nil, err
	}
	ix, err := parseIndex(raw)
	if err != nil {
		return nil, err
	}
	r := &Reader{r: ra, size: size, ix: ix, indexOff: int64(ioff)}
	copy(r.fileDig[:], tr[40:])
	r.segOff = make([]int64, len(ix.packed)+1)
	off := int64(headerSize)
	for i, p := range ix.packed {
		r.segOff[i] = off
		off += p
	}
	r.segOff[len(ix.packed)] = off
	if off != int64(ioff) {
		return nil, errf(ErrFormat, "segments end at %d but the index starts at %d", off, ioff)
	}
	r.byName = make(map[string]int, len(ix.entries))
	r.children = make(map[string][]int)
	for i := range ix.entries {
		n := ix.entries[i].Name
		r.byName[n] = i
		p := path.Dir(n)
		r.children[p] = append(r.children[p], i)
	}
	for _, c := range r.children {
		slices.SortFunc(c, func(a, b int) int {
			return strings.Compare(path.Base(ix.entries[a].Name), path.Base(ix.entries[b].Name))
		})
	}
	r.cache[0].i, r.cache[1].i = -1, -1
	return r, nil
}

// Entries returns the entries sorted by name. The slice must not be changed.
func (r *Reader) Entries() []Entry { return r.ix.entries }

// Meta returns a copy of the metadata.
func (r *Reader) Meta() map[string]string {
	m := make(map[string]string, len(r.ix.meta))
	for k, v := range r.ix.meta {
		m[k] = v
	}
	return m
}

// Size is the bundle's size in bytes.
func (r *Reader) Size() int64 { return r.size }

// DataSize is the length of the uncompressed data stream (each distinct
// content once).
func (r *Reader) DataSize() int64 { return r.ix.dataLen }

// RawSize is the total size of all regular files, duplicates included,
// or math.MaxInt64 when that does not fit in an int64: entries may share
// one content, so a small bundle can declare more than 2^63 bytes (S6).
// It is never negative.
func (r *Reader) RawSize() int64 {
	var n uint64
	for i := range r.ix.entries {
		var carry uint64
		n, carry = bits.Add64(n, uint64(r.ix.entries[i].Size), 0)
		if carry != 0 || n > math.MaxInt64 {
			return math.MaxInt64
		}
	}
	return int64(n)
}

// Segments is the number of compressed segments.
func (r *Reader) Segments() int { return len(r.ix.packed) }

// SegmentSize is the raw size of every segment but the last.
func (r *Reader) SegmentSize() int64 { return r.ix.segSize }

// FileDigest is the whole-file digest the trailer records.
func (r *Reader) FileDigest() Digest { return r.fileDig }

func (r *Reader) entry(i int) *Entry   { return &r.ix.entries[i] }
func (r *Reader) segRaw(i int) int64   { return min(r.ix.segSize, r.ix.dataLen-int64(i)*r.ix.segSize) }
func (r *Reader) errorf(e error) error { return inFile(e, r.name) }

// verifyFileDigest recomputes the digest of the whole file and compares it
// with the trailer's, reporting the bytes read to progress (may be nil).
// Reading and hashing overlap (readahead).
func (r *Reader) verifyFileDigest(ctx context.Context, progress func(n int64)) error {
	h := newHasher()
	err := readahead.Each(ctx, r.r, 0, r.size-16, 4<<20, func(p readahead.Piece) error {
		if p.Err != nil {
			return r.errorf(p.Err)
		}
		h.Write(p.P)
		if progress != nil {
			progress(int64(len(p.P)))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if hasherDigest(h) != r.fileDig {
		return r.errorf(errf(ErrChecksum, "whole-file digest does not match (damaged in storage or transfer)"))
	}
	return nil
}

// segment decodes segment i into dst (reused when large enough).
func (r *Reader) segment(i int, dst []byte) ([]byte, error) {
	p := r.ix.packed[i]
	src := getBuf(p)[:p]
	defer putBuf(src)
	if _, err := r.r.ReadAt(src, r.segOff[i]); err != nil {
		return nil, err
	}
	want := r.segRaw(i)
	out, err := decoder().DecodeAll(src, dst[:0])
	if err != nil || int64(len(out)) != want {
		if err == nil {
			err = fmt.Errorf("%d bytes, want %d", len(out), want)
		}
		return nil, r.errorf(errf(ErrChecksum, "segment %d does not decompress: %v", i, err))
	}
	return out, nil
}

// cachedSegment returns segment i's bytes, decoding it at most once for a
// run of small reads. The returned slice must not be changed.
func (r *Reader) cachedSegment(i int) ([]byte, error) {
	r.cacheMu.Lock()
	defer r.cacheMu.Unlock()
	for _, c := range r.cache {
		if c.i == i {
			return c.data, nil
		}
	}
	data, err := r.segment(i, getBuf(r.segRaw(i)))
	if err != nil {
		return nil, err
	}
	r.cache[1] = r.cache[0]
	r.cache[0] = cachedSeg{i, data}
	return data, nil
}

// blobReader streams a blob's bytes, decompressing segment after segment,
// and checks the digest at the end.
type blobReader struct {
	r       *Reader
	e       *Entry
	pos     int64 // bytes of the blob already returned
	buf     []byte
	h       *xxh3.Hasher
	checked bool
	err     error

	private bool // decode into own instead of the shared cache
	own     []byte
	ownIdx  int
	onSeg   func(seg int) // when set, called before a private decode of segment seg
}

func (r *Reader) openBlob(e *Entry) *blobReader {
	return &blobReader{r: r, e: e, h: newHasher()}
}

func (b *blobReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.pos == b.e.Size {
		if !b.checked {
			b.checked = true
			if hasherDigest(b.h) != b.e.Digest {
				b.err = b.r.errorf(&Error{Entry: b.e.Name, Err: ErrChecksum, Msg: "content does not match its digest"})
				return 0, b.err
			}
		}
		return 0, io.EOF
	}
	if len(b.buf) == 0 {
		abs := b.e.offset + b.pos
		seg := int(abs / b.r.ix.segSize)
		var data []byte
		var err error
		switch {
		case !b.private:
			data, err = b.r.cachedSegment(seg)
		case b.ownIdx == seg && b.own != nil:
			data = b.own
		default:
			if b.onSeg != nil {
				b.onSeg(seg)
			}
			b.own, err = b.r.segment(seg, b.own)
			b.ownIdx, data = seg, b.own
		}
		if err != nil {
			b.err = err
			return 0, err
		}
		start := abs - int64(seg)*b.r.ix.segSize
		end := min(int64(len(data)), start+b.e.Size-b.pos)
		b.buf = data[start:end]
	}
	n := copy(p, b.buf)
	b.h.Write(p[:n])
	b.buf = b.buf[n:]
	b.pos += int64(n)
	return n, nil
}

// ReadEntry returns the verified content of the regular file name.
func (r *Reader) ReadEntry(name string) ([]byte, error) {
	i, ok := r.byName[name]
	if !ok || r.ix.entries[i].Dir {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	e := r.entry(i)
	// Preallocate at most a few MiB: e.Size is only a claim until the
	// content has decompressed (a tiny bundle can declare 2^44 bytes).
	buf := bytes.NewBuffer(make([]byte, 0, min(e.Size, 4<<20)))
	if _, err := io.Copy(buf, r.openBlob(e)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReaderAt returns the bundle's bytes as the Reader reads them.
func (r *Reader) ReaderAt() io.ReaderAt { return r.r }
