package bundle

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
)

// WriterOptions tune a Writer. The zero value is valid.
type WriterOptions struct {
	Level       Level // compression level
	Jobs        int   // compression workers; 0 means all cores (bounded: see Jobs)
	SegmentSize int64 // raw bytes per segment; 0 means DefaultSegmentSize
}

// ErrClosed is returned by a Writer used after Close.
var ErrClosed = errors.New("bundle writer closed")

// A Writer streams a bundle to an io.Writer: entries in any order, content
// compressed in parallel, the index and trailer on Close. Identical
// contents are stored once. A Writer is unusable after its first error,
// which every later call returns. It is not safe for concurrent use.
type Writer struct {
	out     *bufio.Writer
	sink    *hashingWriter
	enc     *zstd.Encoder
	segSize int64
	jobs    int

	seg      []byte
	dataLen  int64
	packed   []int64
	inflight []chan []byte
	sem      chan struct{}

	entries map[string]*Entry
	parents map[string]bool  // every parent directory of an added name
	blobs   map[Digest]int64 // digest → offset
	meta    map[string]string
	err     error
	closed  bool
	digest  Digest
}

type hashingWriter struct {
	w io.Writer
	h *xxh3.Hasher
	n int64
}

func (h *hashingWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// NewWriter returns a Writer that writes a bundle to w.
func NewWriter(w io.Writer, opt *WriterOptions) *Writer {
	if opt == nil {
		opt = &WriterOptions{}
	}
	bw := &Writer{
		segSize: opt.SegmentSize,
		jobs:    opt.Jobs,
		entries: map[string]*Entry{},
		parents: map[string]bool{},
		blobs:   map[Digest]int64{},
		meta:    map[string]string{},
	}
	if bw.segSize == 0 {
		bw.segSize = DefaultSegmentSize
	}
	bw.jobs = Jobs(bw.jobs)
	bw.sem = make(chan struct{}, bw.jobs)
	if bw.segSize < MinSegmentSize || bw.segSize > MaxSegmentSize {
		bw.err = fmt.Errorf("segment size %d outside %d..%d", bw.segSize, MinSegmentSize, MaxSegmentSize)
		return bw
	}
	bw.enc, bw.err = encoder(opt.Level, bw.segSize)
	bw.sink = &hashingWriter{w: w, h: xxh3.New()}
	bw.out = bufio.NewWriterSize(bw.sink, 1<<20)
	var hdr [headerSize]byte
	copy(hdr[:], magic[:])
	binary.LittleEndian.PutUint16(hdr[8:], Version)
	bw.write(hdr[:])
	bw.seg = getBuf(bw.segSize)
	return bw
}

func (w *Writer) write(p []byte) {
	if w.err == nil {
		_, w.err = w.out.Write(p)
	}
}

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return w.err
}

// SetMeta records a metadata pair (see docs/FORMAT.md for the keys).
func (w *Writer) SetMeta(key, value string) error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := checkMetaKey(key); err != nil {
		return err
	}
	if err := checkMetaValue(key, value); err != nil {
		return err
	}
	if _, ok := w.meta[key]; !ok && len(w.meta) >= MaxMeta {
		return errf(ErrTooLarge, "more than %d metadata pairs", MaxMeta)
	}
	w.meta[key] = value
	return nil
}

func (w *Writer) usable() error {
	if w.closed {
		return ErrClosed
	}
	return w.err
}

func (w *Writer) addEntry(e Entry) error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := checkName(e.Name); err != nil {
		err.(*Error).Entry = e.Name
		return err
	}
	if e.Mode&^fs.ModePerm != 0 {
		return &Error{Entry: e.Name, Err: ErrFormat, Msg: "mode has bits beyond 0777"}
	}
	if _, dup := w.entries[e.Name]; dup {
		return &Error{Entry: e.Name, Err: ErrInsecurePath, Msg: "duplicate name"}
	}
	if len(w.entries) >= MaxEntries {
		return errf(ErrTooLarge, "more than %d entries", MaxEntries)
	}
	if err := w.treeConflict(&e); err != nil {
		return err
	}
	w.entries[e.Name] = &e
	for p := path.Dir(e.Name); p != "." && !w.parents[p]; p = path.Dir(p) {
		w.parents[p] = true
	}
	return nil
}

// treeConflict refuses an entry that would make the bundle other than a
// tree (docs/FORMAT.md, "Names": every parent is a directory), which no
// reader accepts: a name below a file added before, or a file with names
// below it added before.
func (w *Writer) treeConflict(e *Entry) error {
	for p := path.Dir(e.Name); p != "."; p = path.Dir(p) {
		if pe, ok := w.entries[p]; ok && !pe.Dir {
			return &Error{Entry: e.Name, Err: ErrFormat, Msg: fmt.Sprintf("its parent %q is a file in this bundle, not a directory", p)}
		}
	}
	if !e.Dir && w.parents[e.Name] {
		return &Error{Entry: e.Name, Err: ErrFormat, Msg: "a file, but the bundle has entries below this name (a directory)"}
	}
	return nil
}

// Mkdir adds a directory. Parents missing at Close are added with mode 0755
// and mtime zero (the Unix epoch).
func (w *Writer) Mkdir(name string, mode fs.FileMode, mtime time.Time) error {
	return w.addEntry(Entry{Name: name, Dir: true, Mode: mode, ModTime: mtime})
}

// WriteFile adds a regular file with the given content.
func (w *Writer) WriteFile(name string, mode fs.FileMode, mtime time.Time, data []byte) error {
	return w.writeFile(name, mode, mtime, data, sum(data))
}

func (w *Writer) writeFile(name string, mode fs.FileMode, mtime time.Time, data []byte, d Digest) error {
	e := Entry{Name: name, Mode: mode, ModTime: mtime, Size: int64(len(data)), Digest: d}
	return w.addBlob(e, func() error { w.appendData(data); return w.err })
}

// CopyFile adds a regular file of the given size and digest whose content
// is read from r only if the bundle does not hold it yet. Exactly size
// bytes are read; content that does not match digest is an error (the file
// changed while it was being packed).
func (w *Writer) CopyFile(name string, mode fs.FileMode, mtime time.Time, size int64, digest Digest, r io.Reader) error {
	e := Entry{Name: name, Mode: mode, ModTime: mtime, Size: size, Digest: digest}
	return w.addBlob(e, func() error {
		h := xxh3.New()
		lr := io.TeeReader(io.LimitReader(r, size), h)
		var n int64
		for n < size && w.err == nil {
			if int64(len(w.seg)) == w.segSize {
				w.flushSegment()
				continue
			}
			room := min(w.segSize-int64(len(w.seg)), size-n)
			m, err := io.ReadFull(lr, w.seg[len(w.seg):int64(len(w.seg))+room])
			w.seg = w.seg[:len(w.seg)+m]
			n += int64(m)
			w.dataLen += int64(m)
			if err != nil {
				return w.fail(&Error{Entry: name, Err: io.ErrUnexpectedEOF, Msg: fmt.Sprintf("read %d of %d bytes: the file changed while being packed", n, size)})
			}
		}
		if w.err == nil && hasherDigest(h) != digest {
			return w.fail(&Error{Entry: name, Err: ErrChecksum, Msg: "content changed while being packed"})
		}
		return w.err
	})
}

func (w *Writer) addBlob(e Entry, store func() error) error {
	if e.Size < 0 {
		return &Error{Entry: e.Name, Err: ErrFormat, Msg: "negative size"}
	}
	if err := w.addEntry(e); err != nil {
		return err
	}
	ep := w.entries[e.Name]
	if e.Size == 0 {
		if e.Digest != emptyDigest {
			return w.fail(&Error{Entry: e.Name, Err: ErrChecksum, Msg: "empty content with a non-empty digest"})
		}
		return nil
	}
	if off, ok := w.blobs[e.Digest]; ok {
		ep.offset = off
		return nil
	}
	if w.dataLen+e.Size > MaxDataLen {
		return w.fail(errf(ErrTooLarge, "more than %d bytes of content", uint64(MaxDataLen)))
	}
	ep.offset = w.dataLen
	w.blobs[e.Digest] = ep.offset
	return store()
}

func (w *Writer) appendData(p []byte) {
	for len(p) > 0 && w.err == nil {
		if int64(len(w.seg)) == w.segSize {
			w.flushSegment()
			continue
		}
		n := min(int64(len(p)), w.segSize-int64(len(w.seg)))
		w.seg = append(w.seg, p[:n]...)
		w.dataLen += n
		p = p[n:]
	}
}

// flushSegment hands the current segment to a compression worker; results
// are written in order, with a bounded number in flight.
func (w *Writer) flushSegment() {
	if len(w.seg) == 0 || w.err != nil {
		return
	}
	raw := w.seg
	w.seg = getBuf(w.segSize)
	ch := make(chan []byte, 1)
	w.sem <- struct{}{}
	go func() {
		out := w.enc.EncodeAll(raw, getBuf(maxPacked(w.segSize)))
		putBuf(raw)
		<-w.sem
		ch <- out
	}()
	w.inflight = append(w.inflight, ch)
	for len(w.inflight) > 2*w.jobs {
		w.drainOne()
	}
}

func (w *Writer) drainOne() {
	out := <-w.inflight[0]
	w.inflight = w.inflight[1:]
	if int64(len(out)) > maxPacked(w.segSize) {
		w.fail(fmt.Errorf("segment %d compressed to %d bytes, beyond the format's limit", len(w.packed), len(out)))
	}
	w.write(out)
	w.packed = append(w.packed, int64(len(out)))
	putBuf(out)
}

// Close writes the last segment, the index and the trailer. It does not
// close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return ErrClosed
	}
	if w.err == nil {
		w.flushSegment()
	}
	for len(w.inflight) > 0 {
		w.drainOne()
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	// A parent directory no entry names (a harvest's layer holds files,
	// not their directories) is dated as its newest entry below it, not
	// 1970 (U42): the same bytes give the same bundle.
	newest := map[string]time.Time{}
	for _, e := range w.entries {
		for p := path.Dir(e.Name); p != "."; p = path.Dir(p) {
			if _, named := w.entries[p]; !named && e.ModTime.After(newest[p]) {
				newest[p] = e.ModTime
			}
		}
	}
	for p := range w.parents {
		if _, ok := w.entries[p]; !ok {
			t, ok := newest[p]
			if !ok {
				t = time.Unix(0, 0)
			}
			w.entries[p] = &Entry{Name: p, Dir: true, Mode: 0o755, ModTime: t}
		}
	}
	ix := &index{segSize: w.segSize, dataLen: w.dataLen, packed: w.packed, meta: w.meta}
	for k := range w.meta {
		ix.metaKeys = append(ix.metaKeys, k)
	}
	slices.Sort(ix.metaKeys)
	ix.entries = make([]Entry, 0, len(w.entries))
	for _, e := range w.entries {
		if e.Dir {
			e.Size, e.offset, e.Digest = 0, 0, Digest{}
		}
		ix.entries = append(ix.entries, *e)
	}
	slices.SortFunc(ix.entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	if err := checkTree(ix.entries); err != nil {
		// The reader's own rule (addEntry keeps to it): never write an
		// index that no reader accepts.
		return w.fail(err)
	}
	if err := w.out.Flush(); err != nil {
		return w.fail(err)
	}
	indexOff := w.sink.n
	raw := appendIndex(nil, ix)
	if len(raw) > MaxIndexLen {
		return w.fail(errf(ErrTooLarge, "index of %d bytes (limit %d)", len(raw), MaxIndexLen))
	}
	ienc, err := encoder(LevelDefault, DefaultSegmentSize) // whatever the content's level
	if err != nil {
		return w.fail(err)
	}
	ib := encodeIndex(ienc, raw)
	if !indexRatioOK(len(raw), len(ib)) {
		// Many long, repetitive names compress beyond the ratio a reader
		// accepts (it bounds what a small file can make it allocate):
		// store the index uncompressed instead, in a zstd frame of raw
		// blocks, so that the bundle stays readable.
		ib = storeIndex(raw)
	}
	w.write(ib)
	var tr [trailerSize - 16]byte
	binary.LittleEndian.PutUint64(tr[0:], uint64(indexOff))
	binary.LittleEndian.PutUint64(tr[8:], uint64(len(ib)))
	d := sum(ib)
	copy(tr[16:], d[:])
	copy(tr[32:], endMagic[:])
	w.write(tr[:])
	if w.err == nil {
		w.err = w.out.Flush()
	}
	if w.err != nil {
		return w.err
	}
	fd := hasherDigest(w.sink.h)
	if _, err := w.sink.w.Write(fd[:]); err != nil {
		return w.fail(err)
	}
	putBuf(w.seg)
	w.seg = nil
	w.digest = fd
	return nil
}

// Digest returns the whole-file digest; valid after a successful Close.
func (w *Writer) Digest() Digest { return w.digest }

// indexRatioOK is the reader's bound on a stored index (decodeIndex): its
// raw length at most maxIndexRatio times the stored length, plus 1 MiB.
func indexRatioOK(raw, stored int) bool {
	return uint64(raw) <= maxIndexRatio*uint64(stored)+1<<20
}

// storeIndex encodes the index as its raw length followed by one zstd
// frame made of raw (uncompressed) blocks (RFC 8878: a single-segment
// frame with an 8-byte content size, no checksum; blocks of at most
// 128 KiB), which any zstd decoder reads.
func storeIndex(raw []byte) []byte {
	const maxBlock = 128 << 10
	out := make([]byte, 0, 8+4+1+8+len(raw)+3*(len(raw)/maxBlock+1))
	out = binary.LittleEndian.AppendUint64(out, uint64(len(raw)))
	out = binary.LittleEndian.AppendUint32(out, 0xFD2FB528) // frame magic
	out = append(out, 0xE0)                                 // 8-byte content size, single segment
	out = binary.LittleEndian.AppendUint64(out, uint64(len(raw)))
	for {
		n := min(len(raw), maxBlock)
		h := uint32(n) << 3 // block type 0: raw
		if n == len(raw) {
			h |= 1 // last block
		}
		out = append(out, byte(h), byte(h>>8), byte(h>>16))
		out = append(out, raw[:n]...)
		raw = raw[n:]
		if len(raw) == 0 {
			return out
		}
	}
}
