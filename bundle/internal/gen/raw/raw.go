// Package raw encodes and decodes kbundle bundles field by field, straight
// from docs/FORMAT.md, without the bundle package. It exists to build test
// vectors and hostile inputs: every field can be set to any value, counts
// and lengths can be declared independently of what follows, and the
// digests are recomputed so that the check under test, not an earlier
// checksum, is the one that fires.
//
// It is test support only: it checks nothing, must never be used to read a
// bundle for real, and must not import the bundle package (the bundle
// package's own tests import it).
package raw

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
)

// Format constants, from docs/FORMAT.md.
const (
	HeaderSize  = 16
	TrailerSize = 56
	KindDir     = 1
	KindFile    = 2
)

// Magic and EndMagic open and close every bundle (docs/FORMAT.md).
var (
	Magic    = [8]byte{0x89, 'K', 'B', 'N', 'D', 'L', '\r', '\n'}
	EndMagic = [8]byte{'K', 'B', 'N', 'D', 'E', 'N', 'D', '\n'}
)

// Sum is XXH3-128 in the canonical byte order.
func Sum(b []byte) [16]byte { return xxh3.Hash128(b).Bytes() }

// Meta is one metadata pair. KeyLen and ValueLen, when not nil, are
// declared instead of the real lengths.
type Meta struct {
	Key, Value string
	KeyLen     *uint16
	ValueLen   *uint32
}

// Entry is one index entry, every field raw. Size, Offset and Digest are
// written only for kind 2 (regular file). NameLen, when not nil, is
// declared instead of len(Name).
type Entry struct {
	Name    string
	NameLen *uint16
	Kind    uint8
	Mode    uint16
	Sec     int64
	Nsec    uint32
	Size    uint64
	Offset  uint64
	Digest  [16]byte
}

// Bundle is a bundle's every field. Nil pointers mean "the consistent
// value"; set them to declare something else.
type Bundle struct {
	Magic    [8]byte
	Version  uint16
	Flags    uint16
	Reserved uint32

	SegmentSize  uint32
	DataLength   uint64
	Segments     [][]byte // compressed frames, in order
	SegmentCount *uint32
	PackedLens   []uint32 // nil: the lengths of Segments
	Meta         []Meta
	MetaCount    *uint32
	Entries      []Entry
	EntryCount   *uint32
	IndexSlack   []byte // bytes after the entries, inside index_length
	Gap          []byte // bytes between the last segment and the index

	// StoredIndex, when not nil, turns the raw index into its stored form
	// instead of StoreIndex.
	StoredIndex func(raw []byte) []byte

	IndexOffset *uint64
	IndexLength *uint64
	IndexDigest *[16]byte
	EndMagic    [8]byte
	FileDigest  *[16]byte
	Trailing    []byte // bytes after the file digest
}

// New returns a bundle with a correct header and end magic and the given
// segment size, and nothing in it.
func New(segSize uint32) *Bundle {
	return &Bundle{Magic: Magic, Version: 1, SegmentSize: segSize, EndMagic: EndMagic}
}

// Index encodes the index alone.
func (b *Bundle) Index() []byte {
	le := binary.LittleEndian
	var x []byte
	x = le.AppendUint32(x, b.SegmentSize)
	x = le.AppendUint64(x, b.DataLength)
	packed := b.PackedLens
	if packed == nil {
		for _, s := range b.Segments {
			packed = append(packed, uint32(len(s)))
		}
	}
	x = le.AppendUint32(x, or32(b.SegmentCount, len(packed)))
	for _, p := range packed {
		x = le.AppendUint32(x, p)
	}
	x = le.AppendUint32(x, or32(b.MetaCount, len(b.Meta)))
	for _, m := range b.Meta {
		kl := uint16(len(m.Key))
		if m.KeyLen != nil {
			kl = *m.KeyLen
		}
		x = le.AppendUint16(x, kl)
		x = append(x, m.Key...)
		vl := uint32(len(m.Value))
		if m.ValueLen != nil {
			vl = *m.ValueLen
		}
		x = le.AppendUint32(x, vl)
		x = append(x, m.Value...)
	}
	x = le.AppendUint32(x, or32(b.EntryCount, len(b.Entries)))
	for _, e := range b.Entries {
		nl := uint16(len(e.Name))
		if e.NameLen != nil {
			nl = *e.NameLen
		}
		x = le.AppendUint16(x, nl)
		x = append(x, e.Name...)
		x = append(x, e.Kind)
		x = le.AppendUint16(x, e.Mode)
		x = le.AppendUint64(x, uint64(e.Sec))
		x = le.AppendUint32(x, e.Nsec)
		if e.Kind == KindFile {
			x = le.AppendUint64(x, e.Size)
			x = le.AppendUint64(x, e.Offset)
			x = append(x, e.Digest[:]...)
		}
	}
	return append(x, b.IndexSlack...)
}

func or32(p *uint32, n int) uint32 {
	if p != nil {
		return *p
	}
	return uint32(n)
}

// Encode returns the bundle's bytes, every digest computed unless
// overridden.
func (b *Bundle) Encode() []byte {
	le := binary.LittleEndian
	var out []byte
	out = append(out, b.Magic[:]...)
	out = le.AppendUint16(out, b.Version)
	out = le.AppendUint16(out, b.Flags)
	out = le.AppendUint32(out, b.Reserved)
	for _, s := range b.Segments {
		out = append(out, s...)
	}
	out = append(out, b.Gap...)
	ioff := uint64(len(out))
	store := StoreIndex
	if b.StoredIndex != nil {
		store = b.StoredIndex
	}
	ix := store(b.Index())
	out = append(out, ix...)
	if b.IndexOffset != nil {
		ioff = *b.IndexOffset
	}
	ilen := uint64(len(ix))
	if b.IndexLength != nil {
		ilen = *b.IndexLength
	}
	out = le.AppendUint64(out, ioff)
	out = le.AppendUint64(out, ilen)
	d := Sum(ix)
	if b.IndexDigest != nil {
		d = *b.IndexDigest
	}
	out = append(out, d[:]...)
	out = append(out, b.EndMagic[:]...)
	fd := Sum(out)
	if b.FileDigest != nil {
		fd = *b.FileDigest
	}
	out = append(out, fd[:]...)
	return append(out, b.Trailing...)
}

// Refresh recomputes the trailing file digest of an encoded bundle in
// place (after a byte-level change), so that only the change is wrong.
func Refresh(b []byte) []byte {
	if len(b) < 16 {
		return b
	}
	d := Sum(b[:len(b)-16])
	copy(b[len(b)-16:], d[:])
	return b
}

// Encoder returns a zstd encoder configured as the bundle package's
// writer configures its own for segSize and the default level, so that
// bundles built here can equal the writer's byte for byte.
func Encoder(segSize int64) *zstd.Encoder {
	win := zstd.MinWindowSize
	for int64(win) < segSize {
		win <<= 1
	}
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false),
		zstd.WithWindowSize(win),
		zstd.WithZeroFrames(true),
	)
	if err != nil {
		panic(err)
	}
	return e
}

// IndexEncoder is the encoder kbundle's writer uses for the index,
// whatever the content's level: the default level with an 8 MiB window.
func IndexEncoder() *zstd.Encoder { return Encoder(8 << 20) }

// StoreIndex turns a raw index into its stored form: the raw length (u64)
// and one zstd frame.
func StoreIndex(raw []byte) []byte {
	enc := IndexEncoder()
	defer enc.Close()
	return enc.EncodeAll(raw, binary.LittleEndian.AppendUint64(nil, uint64(len(raw))))
}

// LoadIndex undoes StoreIndex, trusting its input.
func LoadIndex(stored []byte) ([]byte, error) {
	if len(stored) < 8 {
		return nil, errors.New("raw: index too short")
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	return dec.DecodeAll(stored[8:], nil)
}

// SetData cuts data into segments of b.SegmentSize, compresses each and
// sets DataLength.
func (b *Bundle) SetData(data []byte) {
	enc := Encoder(int64(b.SegmentSize))
	defer enc.Close()
	b.Segments = nil
	b.DataLength = uint64(len(data))
	for len(data) > 0 {
		n := min(len(data), int(b.SegmentSize))
		b.Segments = append(b.Segments, enc.EncodeAll(data[:n], nil))
		data = data[n:]
	}
}

// File is one file or directory of a tree to lay out with Build.
type File struct {
	Name string
	Dir  bool
	Mode uint16
	Sec  int64
	Nsec uint32
	Data []byte
}

// Build lays out files as kbundle's writer does: blobs in the order the
// files are given (the first file with a content stores it), entries
// sorted by name, then compresses the data stream. files must be given in
// the writer's data order and must include every parent directory.
func Build(segSize uint32, meta []Meta, files []File) *Bundle {
	b := New(segSize)
	b.Meta = meta
	var data []byte
	at := map[[16]byte]uint64{}
	for _, f := range files {
		e := Entry{Name: f.Name, Kind: KindFile, Mode: f.Mode, Sec: f.Sec, Nsec: f.Nsec}
		if f.Dir {
			e.Kind = KindDir
			b.Entries = append(b.Entries, e)
			continue
		}
		e.Size = uint64(len(f.Data))
		e.Digest = Sum(f.Data)
		if len(f.Data) > 0 {
			off, ok := at[e.Digest]
			if !ok {
				off = uint64(len(data))
				at[e.Digest] = off
				data = append(data, f.Data...)
			}
			e.Offset = off
		}
		b.Entries = append(b.Entries, e)
	}
	sortEntries(b.Entries)
	b.SetData(data)
	return b
}

func sortEntries(es []Entry) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].Name < es[j-1].Name; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// Decode splits a well-formed bundle into its fields (for deriving
// variants). It trusts its input far more than a reader may: it is for
// bundles this package or kbundle's writer made.
func Decode(in []byte) (*Bundle, error) {
	le := binary.LittleEndian
	if len(in) < HeaderSize+TrailerSize {
		return nil, errors.New("raw: too short")
	}
	b := &Bundle{}
	copy(b.Magic[:], in)
	b.Version = le.Uint16(in[8:])
	b.Flags = le.Uint16(in[10:])
	b.Reserved = le.Uint32(in[12:])
	tr := in[len(in)-TrailerSize:]
	copy(b.EndMagic[:], tr[32:40])
	ioff, ilen := le.Uint64(tr), le.Uint64(tr[8:])
	if ioff+ilen != uint64(len(in)-TrailerSize) {
		return nil, errors.New("raw: index does not end at the trailer")
	}
	x, err := LoadIndex(in[ioff : ioff+ilen])
	if err != nil {
		return nil, err
	}
	u16 := func() uint16 { v := le.Uint16(x); x = x[2:]; return v }
	u32 := func() uint32 { v := le.Uint32(x); x = x[4:]; return v }
	u64 := func() uint64 { v := le.Uint64(x); x = x[8:]; return v }
	bytes := func(n int) []byte { v := x[:n]; x = x[n:]; return v }
	b.SegmentSize = u32()
	b.DataLength = u64()
	nseg := u32()
	off := uint64(HeaderSize)
	for range nseg {
		p := u32()
		b.Segments = append(b.Segments, in[off:off+uint64(p)])
		off += uint64(p)
	}
	if off != ioff {
		return nil, fmt.Errorf("raw: segments end at %d, index at %d", off, ioff)
	}
	for range u32() {
		var m Meta
		m.Key = string(bytes(int(u16())))
		m.Value = string(bytes(int(u32())))
		b.Meta = append(b.Meta, m)
	}
	for range u32() {
		var e Entry
		e.Name = string(bytes(int(u16())))
		e.Kind = bytes(1)[0]
		e.Mode = u16()
		e.Sec = int64(u64())
		e.Nsec = u32()
		if e.Kind == KindFile {
			e.Size = u64()
			e.Offset = u64()
			copy(e.Digest[:], bytes(16))
		}
		b.Entries = append(b.Entries, e)
	}
	if len(x) != 0 {
		return nil, errors.New("raw: slack after the index")
	}
	return b, nil
}

// U16 returns a pointer to v, for the override fields.
func U16(v uint16) *uint16 { return &v }

// U32 returns a pointer to v, for the override fields.
func U32(v uint32) *uint32 { return &v }

// U64 returns a pointer to v, for the override fields.
func U64(v uint64) *uint64 { return &v }

// ContentDigest is the content digest of entries (docs/FORMAT.md,
// "Content digest"), written from the specification alone: XXH3-128 of
// "kbundle content 1\n", the entry count (u32), then per entry in the
// order given (the index's, ascending by name) its name length (u16),
// name, kind (u8), mode without group and other write (u16) and, for a
// regular file, its size (u64) and content digest.
func ContentDigest(entries []Entry) [16]byte {
	le := binary.LittleEndian
	b := []byte("kbundle content 1\n")
	b = le.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		b = le.AppendUint16(b, uint16(len(e.Name)))
		b = append(b, e.Name...)
		b = append(b, e.Kind)
		b = le.AppendUint16(b, e.Mode&^0o022)
		if e.Kind == KindFile {
			b = le.AppendUint64(b, e.Size)
			b = append(b, e.Digest[:]...)
		}
	}
	return Sum(b)
}
