// Package vectors defines kbundle's test vectors: one small bundle per
// scenario, each with the outcome a reader must give. `go run
// ./bundle/internal/gen` writes them to bundle/testdata/vectors/, and the
// bundle package's tests check both that the committed files equal what
// All returns and that the reader gives every expected outcome.
//
// The vectors are built with package raw, straight from docs/FORMAT.md,
// not with the bundle package: they test the implementation against the
// specification. Vectors must stay tiny (under 4 KiB) and deterministic.
package vectors

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"slices"

	"github.com/kbundle/kbundle/bundle/internal/gen/raw"
)

// Stages at which a reader must report a vector's outcome.
const (
	StageOK     = "-"      // opens, verifies and extracts
	StageOpen   = "open"   // NewReader fails
	StageVerify = "verify" // NewReader succeeds, Verify fails
)

// Outcomes: "ok" or the name of a bundle sentinel error.
const (
	OK              = "ok"
	ErrFormat       = "ErrFormat"
	ErrVersion      = "ErrVersion"
	ErrChecksum     = "ErrChecksum"
	ErrInsecurePath = "ErrInsecurePath"
	ErrTooLarge     = "ErrTooLarge"
)

// Vector is one scenario.
type Vector struct {
	Name  string // file name is Name + ".kbundle"
	Want  string // OK or an Err* constant
	Stage string // StageOK, StageOpen or StageVerify
	Doc   string // one line: what is wrong
	Data  []byte
	// Files is the expected tree, in the order it was written, for OK
	// vectors (so a test can rebuild the bundle with the real writer).
	Files []raw.File
	Meta  []raw.Meta
	// SegmentSize of OK vectors.
	SegmentSize uint32
}

// SegSize is the segment size of the vectors (the format's minimum).
const SegSize = 64 << 10

// Meta is the metadata of every vector built from a tree.
var Meta = []raw.Meta{
	{Key: "content_time", Value: "2023-11-14T22:13:20.123456789Z"},
	{Key: "creator", Value: "kbundle vectors"},
	{Key: "host.arch", Value: "amd64"},
	{Key: "host.os", Value: "linux"},
	{Key: "origin", Value: "/vectors"},
}

var ptx = []byte(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n\tret;\n}\n")

// basicFiles is a small cache: directories, an empty file, duplicate
// content, a multi-extension order, modes and nanosecond mtimes. It is in
// the writer's data order (extension, then name).
func basicFiles() []raw.File {
	return []raw.File{
		{Name: "a", Dir: true, Mode: 0o755, Sec: 1700000000, Nsec: 1},
		{Name: "a/sub", Dir: true, Mode: 0o750, Sec: 1700000001, Nsec: 999999999},
		{Name: "empty-dir", Dir: true, Mode: 0o700, Sec: 0},
		{Name: "a/empty", Mode: 0o644, Sec: 1700000002, Nsec: 5},
		{Name: "c", Mode: 0o755, Sec: 1700000003, Nsec: 0, Data: []byte("#!/bin/sh\necho kernel\n")},
		{Name: "b.json", Mode: 0o644, Sec: 1700000004, Nsec: 123456789, Data: []byte(`{"name":"k","num_warps":4}` + "\n")},
		{Name: "a/k.ptx", Mode: 0o644, Sec: 1700000000, Nsec: 123456789, Data: ptx},
		{Name: "a/sub/dup.ptx", Mode: 0o600, Sec: -1, Nsec: 7, Data: ptx},
	}
}

func basic() *raw.Bundle { return raw.Build(SegSize, slices.Clone(Meta), basicFiles()) }

// twoFiles is a bundle of two files "x" and "y" with 5 bytes each.
func twoFiles() *raw.Bundle {
	return raw.Build(SegSize, nil, []raw.File{
		{Name: "x", Mode: 0o644, Data: []byte("xxxxx")},
		{Name: "y", Mode: 0o644, Data: []byte("yyyyy")},
	})
}

// entry returns the entry named name.
func entry(b *raw.Bundle, name string) *raw.Entry {
	for i := range b.Entries {
		if b.Entries[i].Name == name {
			return &b.Entries[i]
		}
	}
	panic("vectors: no entry " + name)
}

// sortedWith returns basic with one more entry, keeping names sorted so
// that the name check (not the order check) fires.
func sortedWith(e raw.Entry) []byte {
	b := basic()
	b.Entries = append(b.Entries, e)
	slices.SortStableFunc(b.Entries, func(x, y raw.Entry) int { return bytes.Compare([]byte(x.Name), []byte(y.Name)) })
	return b.Encode()
}

func fileEntry(name string) raw.Entry {
	return raw.Entry{Name: name, Kind: raw.KindFile, Mode: 0o644, Size: 0, Digest: raw.Sum(nil)}
}

// segmentArea returns the offsets of the segment bytes of an encoded bundle.
func segmentArea(b *raw.Bundle) (start, end int) {
	end = raw.HeaderSize
	for _, s := range b.Segments {
		end += len(s)
	}
	return raw.HeaderSize, end
}

func flip(data []byte, off int, bit uint) []byte {
	data = slices.Clone(data)
	data[off] ^= 1 << bit
	return data
}

// All returns every vector, in a fixed order.
func All() []Vector {
	var vs []Vector
	add := func(name, want, stage, doc string, data []byte) {
		vs = append(vs, Vector{Name: name, Want: want, Stage: stage, Doc: doc, Data: data})
	}
	addOK := func(name, doc string, meta []raw.Meta, files []raw.File) {
		b := raw.Build(SegSize, meta, files)
		vs = append(vs, Vector{Name: name, Want: OK, Stage: StageOK, Doc: doc, Data: b.Encode(),
			Files: files, Meta: meta, SegmentSize: SegSize})
	}

	// Valid bundles.
	addOK("valid-basic", "directories, an empty file, duplicate content, modes, nanosecond and negative mtimes",
		Meta, basicFiles())
	addOK("valid-empty", "no entries, no metadata, no data", nil, nil)
	addOK("valid-basic-moved", "valid-basic packed elsewhere, later, with other mtimes: the same content digest",
		movedMeta(), movedFiles())
	big := bytes.Repeat([]byte("0123456789abcdef.reg .f32 %r<7>;\n"), 2200) // 72600 bytes: two segments
	addOK("valid-two-segments", "one file spanning two segments, one in the second",
		Meta, []raw.File{
			{Name: "big.bin", Mode: 0o644, Sec: 1700000000, Data: big},
			{Name: "small.txt", Mode: 0o644, Sec: 1700000000, Data: []byte("small\n")},
		})
	addOK("valid-unknown-meta", "a metadata key this version does not know (kept, not an error)",
		append(slices.Clone(Meta), raw.Meta{Key: "zz.future-key_2", Value: "some value ✓"}),
		[]raw.File{{Name: "k.cubin", Mode: 0o644, Sec: 1, Data: []byte{0x7f, 'E', 'L', 'F', 0, 1, 2}}})
	addOK("valid-unicode", "unicode names, deep directories",
		Meta, []raw.File{
			{Name: "ünï", Dir: true, Mode: 0o755},
			{Name: "ünï/κ", Dir: true, Mode: 0o755},
			{Name: "ünï/κ/d", Dir: true, Mode: 0o755},
			{Name: "ünï/κ/d/名前.json", Mode: 0o444, Sec: 1700000000, Nsec: 42, Data: []byte("{}")},
		})

	// Not a bundle at all; header.
	add("empty-file", ErrFormat, StageOpen, "zero bytes", nil)
	add("text-file", ErrFormat, StageOpen, "a short text file", []byte("hello, kernel cache\n"))
	add("zeros", ErrFormat, StageOpen, "72 zero bytes (header+trailer size)", make([]byte, 72))
	add("zstd-frame", ErrFormat, StageOpen, "a bare zstd frame, as if someone ran zstd on a cache",
		raw.Encoder(SegSize).EncodeAll(bytes.Repeat([]byte("not a bundle "), 20), nil))
	good := basic().Encode()
	add("wrong-magic", ErrFormat, StageOpen, "first magic byte 0x88", raw.Refresh(flip(good, 0, 0)))
	add("magic-lf-mangled", ErrFormat, StageOpen, "CR LF of the magic turned into LF LF (line-ending mangling)",
		raw.Refresh(func() []byte { d := slices.Clone(good); d[6] = '\n'; return d }()))
	for _, v := range []struct {
		name, doc string
		set       func(*raw.Bundle)
	}{
		{"version-2", "format version 2", func(b *raw.Bundle) { b.Version = 2 }},
		{"version-0", "format version 0", func(b *raw.Bundle) { b.Version = 0 }},
		{"version-ffff", "format version 65535", func(b *raw.Bundle) { b.Version = 0xffff }},
		{"flags-1", "header flags 1", func(b *raw.Bundle) { b.Flags = 1 }},
		{"reserved-nonzero", "header reserved field not 0", func(b *raw.Bundle) { b.Reserved = 1 << 31 }},
	} {
		b := basic()
		v.set(b)
		add(v.name, ErrVersion, StageOpen, v.doc, b.Encode())
	}

	// Trailer and layout.
	add("truncated-trailer", ErrFormat, StageOpen, "the last 20 bytes missing", good[:len(good)-20])
	add("truncated-half", ErrFormat, StageOpen, "cut in the middle", good[:len(good)/2])
	add("truncated-header-only", ErrFormat, StageOpen, "only the 16-byte header", good[:16])
	add("truncated-one-byte", ErrFormat, StageOpen, "the last byte missing", good[:len(good)-1])
	add("trailing-garbage", ErrFormat, StageOpen, "bytes appended after the trailer", append(slices.Clone(good), "garbage\n"...))
	add("trailing-zero", ErrFormat, StageOpen, "one zero byte appended", append(slices.Clone(good), 0))
	add("trailing-copy-of-trailer", ErrFormat, StageOpen, "the trailer appended a second time",
		append(slices.Clone(good), good[len(good)-raw.TrailerSize:]...))
	{
		b := basic()
		b.EndMagic[7] = '\r'
		add("bad-end-magic", ErrFormat, StageOpen, "end magic KBNDEND\\r", b.Encode())
	}
	{
		b := basic()
		n := uint64(len(raw.StoreIndex(b.Index())))
		b.IndexLength = raw.U64(n + 1000)
		add("index-length-past-file", ErrFormat, StageOpen, "index_length reaches past the start of the file", b.Encode())
	}
	{
		b := basic()
		b.IndexLength = raw.U64(1<<30 + 1)
		add("index-length-too-large", ErrTooLarge, StageOpen, "index_length 1 GiB + 1", b.Encode())
	}
	{
		b := basic()
		b.IndexLength = raw.U64(1 << 63)
		add("index-length-huge", ErrTooLarge, StageOpen, "index_length 2^63", b.Encode())
	}
	{
		b := basic()
		b.IndexOffset = raw.U64(1 << 40)
		add("index-offset-past-file", ErrFormat, StageOpen, "index_offset beyond the end of the file", b.Encode())
	}
	{
		b := basic()
		b.IndexOffset = raw.U64(0)
		add("index-offset-zero", ErrFormat, StageOpen, "index_offset 0 (inside the header)", b.Encode())
	}
	{
		b := basic()
		b.Gap = []byte("slack")
		add("gap-before-index", ErrFormat, StageOpen, "bytes between the last segment and the index", b.Encode())
	}
	{
		b := basic()
		b.IndexSlack = []byte{0}
		add("index-slack", ErrFormat, StageOpen, "a byte after the last entry, inside index_length", b.Encode())
	}
	{
		b := basic()
		b.IndexDigest = &[16]byte{1}
		add("index-digest-wrong", ErrChecksum, StageOpen, "index digest does not match the index", b.Encode())
	}
	{
		b := basic()
		ix := raw.StoreIndex(b.Index())
		at := len(good) - raw.TrailerSize - len(ix) + len(ix)/2
		add("flipped-bit-in-entry", ErrChecksum, StageOpen, "one bit of the stored index flipped (index digest catches it)",
			raw.Refresh(flip(good, at, 1)))
	}
	{
		b := basic()
		b.StoredIndex = func(ix []byte) []byte { return append(binary.LittleEndian.AppendUint64(nil, uint64(len(ix))), ix...) }
		add("index-not-compressed", ErrFormat, StageOpen, "the index stored without zstd", b.Encode())
	}
	{
		b := basic()
		b.StoredIndex = func(ix []byte) []byte {
			st := raw.StoreIndex(ix)
			binary.LittleEndian.PutUint64(st, uint64(len(ix)+1))
			return st
		}
		add("index-raw-length-wrong", ErrFormat, StageOpen, "the index's declared raw length is one more than it decompresses to", b.Encode())
	}
	{
		b := basic()
		b.StoredIndex = func(ix []byte) []byte {
			st := raw.StoreIndex(ix)
			binary.LittleEndian.PutUint64(st, 1<<30+1)
			return st
		}
		add("index-raw-length-too-large", ErrTooLarge, StageOpen, "the index declares 1 GiB + 1 raw bytes", b.Encode())
	}
	{
		b := basic()
		b.StoredIndex = func(ix []byte) []byte {
			st := raw.StoreIndex(ix)
			binary.LittleEndian.PutUint64(st, 64*uint64(len(st))+1<<20+1)
			return st
		}
		add("index-raw-length-ratio", ErrTooLarge, StageOpen, "the index declares more than 64 times its stored size plus 1 MiB", b.Encode())
	}
	{
		b := basic()
		b.FileDigest = &[16]byte{1}
		add("file-digest-wrong", ErrChecksum, StageVerify, "whole-file digest does not match", b.Encode())
	}
	{
		b := basic()
		s, e := segmentArea(b)
		add("flipped-bit-in-segment", ErrChecksum, StageVerify, "one bit of a segment flipped (whole-file digest catches it)",
			flip(good, (s+e)/2, 3))
		at := bytes.Index(good, []byte("echo kernel"))
		if at < s || at >= e {
			panic("vectors: content not stored literally")
		}
		add("flipped-bit-in-content", ErrChecksum, StageVerify, "one bit of stored content flipped, file digest recomputed (content digest catches it)",
			raw.Refresh(flip(good, at, 0)))
	}
	{
		b := basic()
		entry(b, "c").Digest[0] ^= 1
		add("content-digest-wrong", ErrChecksum, StageVerify, "an entry's digest does not match its content", b.Encode())
	}
	{
		b := twoFiles()
		b.Segments[0] = raw.Encoder(SegSize).EncodeAll([]byte("xxxxxyyyy"), nil)
		add("segment-decodes-short", ErrChecksum, StageVerify, "a segment decompresses to fewer bytes than the index says", b.Encode())
		b.Segments[0] = raw.Encoder(SegSize).EncodeAll([]byte("xxxxxyyyyyz"), nil)
		add("segment-decodes-long", ErrChecksum, StageVerify, "a segment decompresses to more bytes than the index says", b.Encode())
		b.Segments[0] = []byte("this is not zstd")
		add("segment-not-zstd", ErrChecksum, StageVerify, "a segment that is not a zstd frame", b.Encode())
	}

	// Index header: segments.
	for _, v := range []struct {
		name, want, doc string
		set             func(*raw.Bundle)
	}{
		{"segment-size-zero", ErrFormat, "segment_size 0", func(b *raw.Bundle) { b.SegmentSize = 0 }},
		{"segment-size-too-small", ErrFormat, "segment_size 65535, below the minimum", func(b *raw.Bundle) { b.SegmentSize = 64<<10 - 1 }},
		{"segment-size-too-large", ErrTooLarge, "segment_size 64 MiB + 1, beyond the limit", func(b *raw.Bundle) { b.SegmentSize = 64<<20 + 1 }},
		{"segment-size-huge", ErrTooLarge, "segment_size 2^32-1", func(b *raw.Bundle) { b.SegmentSize = 0xffffffff }},
		{"data-length-too-large", ErrTooLarge, "data_length 2^44 + 1", func(b *raw.Bundle) { b.DataLength = 1<<44 + 1 }},
		{"data-length-huge", ErrTooLarge, "data_length 2^64-1", func(b *raw.Bundle) { b.DataLength = 1<<64 - 1 }},
		{"segment-count-mismatch", ErrFormat, "segment_count 2 for one segment's worth of data", func(b *raw.Bundle) { b.SegmentCount = raw.U32(2) }},
		{"segment-count-zero", ErrFormat, "segment_count 0 with data", func(b *raw.Bundle) { b.SegmentCount = raw.U32(0); b.PackedLens = []uint32{} }},
		{"segment-count-past-index", ErrFormat, "segment_count 100000 with data_length to match, more than the index holds", func(b *raw.Bundle) {
			b.SegmentCount = raw.U32(100000)
			b.DataLength = 100000 * SegSize
		}},
		{"packed-length-zero", ErrFormat, "a segment's packed_len 0", func(b *raw.Bundle) { b.PackedLens = []uint32{0} }},
		{"packed-length-too-large", ErrTooLarge, "a segment's packed_len beyond segment_size + segment_size/128 + 4096", func(b *raw.Bundle) {
			b.PackedLens = []uint32{SegSize + SegSize/128 + 4096 + 1}
		}},
		{"packed-lengths-past-index", ErrFormat, "packed lengths that add up to more than the segment area", func(b *raw.Bundle) {
			b.PackedLens = []uint32{uint32(len(b.Segments[0]) + 1)}
		}},
		{"data-length-short", ErrFormat, "data_length smaller than the blobs need", func(b *raw.Bundle) { b.DataLength-- }},
		{"data-length-long", ErrFormat, "data_length larger than the blobs cover", func(b *raw.Bundle) { b.DataLength++ }},
	} {
		b := basic()
		v.set(b)
		add(v.name, v.want, StageOpen, v.doc, b.Encode())
	}

	// Metadata.
	for _, v := range []struct {
		name, want, doc string
		set             func(*raw.Bundle)
	}{
		{"meta-count-too-large", ErrTooLarge, "meta_count 257", func(b *raw.Bundle) { b.MetaCount = raw.U32(257) }},
		{"meta-count-huge", ErrTooLarge, "meta_count 2^32-1", func(b *raw.Bundle) { b.MetaCount = raw.U32(0xffffffff) }},
		{"meta-count-past-index", ErrFormat, "meta_count 200, more than the index holds", func(b *raw.Bundle) { b.MetaCount = raw.U32(200) }},
		{"meta-key-empty", ErrFormat, "an empty metadata key", func(b *raw.Bundle) { b.Meta = append([]raw.Meta{{Key: ""}}, b.Meta...) }},
		{"meta-key-uppercase", ErrFormat, "metadata key with an upper-case letter", func(b *raw.Bundle) { b.Meta[0].Key = "Content_time" }},
		{"meta-key-slash", ErrFormat, "metadata key with a slash", func(b *raw.Bundle) { b.Meta[0].Key = "a/b" }},
		{"meta-key-too-long", ErrTooLarge, "metadata key of 129 bytes", func(b *raw.Bundle) {
			b.Meta = append(b.Meta, raw.Meta{Key: "z" + string(bytes.Repeat([]byte("z"), 128))})
		}},
		{"meta-key-length-declared-huge", ErrTooLarge, "metadata key_length 65535 with 3 bytes following", func(b *raw.Bundle) {
			b.Meta = append(b.Meta, raw.Meta{Key: "zzz", KeyLen: raw.U16(0xffff)})
		}},
		{"meta-value-length-declared-huge", ErrTooLarge, "metadata value_length 2^32-1 with 1 byte following", func(b *raw.Bundle) {
			b.Meta[len(b.Meta)-1].ValueLen = raw.U32(0xffffffff)
		}},
		{"meta-value-length-past-index", ErrFormat, "metadata value_length 60000 (within the limit) past the index's end", func(b *raw.Bundle) {
			b.Meta[len(b.Meta)-1].ValueLen = raw.U32(60000)
		}},
		{"meta-value-not-utf8", ErrFormat, "metadata value that is not UTF-8", func(b *raw.Bundle) { b.Meta[0].Value = "\xff\xfe" }},
		{"meta-unsorted", ErrFormat, "metadata keys out of order", func(b *raw.Bundle) { b.Meta[0], b.Meta[1] = b.Meta[1], b.Meta[0] }},
		{"meta-duplicate", ErrFormat, "a metadata key twice", func(b *raw.Bundle) { b.Meta = slices.Insert(slices.Clone(b.Meta), 1, b.Meta[0]) }},
	} {
		b := basic()
		v.set(b)
		add(v.name, v.want, StageOpen, v.doc, b.Encode())
	}

	// Entry count and fields.
	for _, v := range []struct {
		name, want, doc string
		set             func(*raw.Bundle)
	}{
		{"entry-count-too-large", ErrTooLarge, "entry_count 4194305", func(b *raw.Bundle) { b.EntryCount = raw.U32(1<<22 + 1) }},
		{"entry-count-huge", ErrTooLarge, "entry_count 2^32-1", func(b *raw.Bundle) { b.EntryCount = raw.U32(0xffffffff) }},
		{"entry-count-past-index", ErrFormat, "entry_count 1000 (within the limit), more than the index holds", func(b *raw.Bundle) { b.EntryCount = raw.U32(1000) }},
		{"entry-count-short", ErrFormat, "entry_count one less than the entries (slack follows)", func(b *raw.Bundle) { b.EntryCount = raw.U32(uint32(len(b.Entries) - 1)) }},
		{"name-length-declared-huge", ErrTooLarge, "name_length 65535 with a few bytes following", func(b *raw.Bundle) { entry(b, "c").NameLen = raw.U16(0xffff) }},
		{"name-length-declared-4097", ErrTooLarge, "name_length 4097, one beyond the limit", func(b *raw.Bundle) { entry(b, "c").NameLen = raw.U16(4097) }},
		{"kind-0", ErrFormat, "entry kind 0", func(b *raw.Bundle) { entry(b, "a/sub").Kind = 0 }},
		{"kind-3", ErrFormat, "entry kind 3 (a symlink, say)", func(b *raw.Bundle) { entry(b, "a/sub").Kind = 3 }},
		{"mode-setuid", ErrFormat, "mode 04755 (setuid)", func(b *raw.Bundle) { entry(b, "c").Mode = 0o4755 }},
		{"mode-sticky-dir", ErrFormat, "directory mode 01777 (sticky)", func(b *raw.Bundle) { entry(b, "a").Mode = 0o1777 }},
		{"mode-high-bits", ErrFormat, "mode 0xffff", func(b *raw.Bundle) { entry(b, "b.json").Mode = 0xffff }},
		{"mtime-nsec-1e9", ErrFormat, "mtime nanoseconds 1000000000", func(b *raw.Bundle) { entry(b, "c").Nsec = 1e9 }},
		{"file-size-past-data", ErrFormat, "a file whose size reaches past data_length", func(b *raw.Bundle) { entry(b, "c").Size = b.DataLength + 1 }},
		{"file-offset-past-data", ErrFormat, "a file whose offset lies past data_length", func(b *raw.Bundle) { entry(b, "c").Offset = b.DataLength }},
		{"file-offset-huge", ErrFormat, "a file offset of 2^64-1 (overflow bait)", func(b *raw.Bundle) { entry(b, "c").Offset = 1<<64 - 1 }},
		{"file-size-huge", ErrFormat, "a file size of 2^63 (overflow bait)", func(b *raw.Bundle) { entry(b, "c").Size = 1 << 63 }},
		{"empty-file-with-offset", ErrFormat, "an empty file with offset 3", func(b *raw.Bundle) { entry(b, "a/empty").Offset = 3 }},
		{"empty-file-wrong-digest", ErrFormat, "an empty file whose digest is not that of no bytes", func(b *raw.Bundle) { entry(b, "a/empty").Digest = [16]byte{} }},
		{"duplicate-name", ErrInsecurePath, "two entries named b.json", func(b *raw.Bundle) {
			e := *entry(b, "b.json")
			b.Entries = slices.Insert(b.Entries, slices.IndexFunc(b.Entries, func(x raw.Entry) bool { return x.Name == "b.json" }), e)
		}},
		{"duplicate-dir-and-file", ErrInsecurePath, "a directory and a file both named a", func(b *raw.Bundle) {
			b.Entries = slices.Insert(b.Entries, 1, fileEntry("a"))
		}},
		{"unsorted-names", ErrInsecurePath, "entries not in name order (c before b.json)", func(b *raw.Bundle) {
			i := slices.IndexFunc(b.Entries, func(x raw.Entry) bool { return x.Name == "b.json" })
			b.Entries[i], b.Entries[i+1] = b.Entries[i+1], b.Entries[i]
		}},
		{"missing-parent-dir", ErrFormat, "a file x/y whose parent x is not an entry", func(b *raw.Bundle) {
			b.Entries = append(b.Entries, fileEntry("x/y"))
		}},
		{"parent-is-a-file", ErrFormat, "a file c/x whose parent c is a regular file", func(b *raw.Bundle) {
			i := slices.IndexFunc(b.Entries, func(x raw.Entry) bool { return x.Name == "c" })
			b.Entries = slices.Insert(b.Entries, i+1, fileEntry("c/x"))
		}},
		{"blobs-gap", ErrFormat, "a byte of the data stream belongs to no file", func(b *raw.Bundle) {
			for i := range b.Entries {
				if e := &b.Entries[i]; e.Kind == raw.KindFile && e.Size > 0 && e.Offset > 0 {
					e.Offset++
				}
			}
			b.SetData(append(make([]byte, b.DataLength), 0))
		}},
		{"blobs-overlap", ErrFormat, "two different contents overlap in the data stream", func(b *raw.Bundle) { entry(b, "b.json").Offset-- }},
		{"blob-stored-twice", ErrFormat, "identical content stored at two offsets", func(b *raw.Bundle) {
			e := entry(b, "a/sub/dup.ptx")
			e.Offset = b.DataLength
			b.SetData(append(make([]byte, b.DataLength), ptx...))
		}},
		{"shared-offset-other-size", ErrFormat, "two files at one offset with different sizes", func(b *raw.Bundle) {
			entry(b, "a/sub/dup.ptx").Size--
		}},
		{"shared-offset-other-digest", ErrFormat, "two files at one offset with different digests", func(b *raw.Bundle) {
			entry(b, "a/sub/dup.ptx").Digest[15] ^= 0x80
		}},
	} {
		b := basic()
		v.set(b)
		add(v.name, v.want, StageOpen, v.doc, b.Encode())
	}

	// Names.
	for _, v := range []struct{ name, entry, doc string }{
		{"name-dotdot", "../x", "../x"},
		{"name-dotdot-inside", "a/../x", "a/../x (.. inside)"},
		{"name-dotdot-only", "..", ".."},
		{"name-dot", ".", "."},
		{"name-dot-component", "a/./x", "a/./x"},
		{"name-abs", "/abs", "/abs"},
		{"name-abs-etc", "/etc/passwd", "/etc/passwd"},
		{"name-backslash", "a\\b", "a\\b (backslash)"},
		{"name-backslash-dotdot", "..\\x", "..\\x (Windows-style escape)"},
		{"name-empty", "", "an empty name"},
		{"name-double-slash", "a//x", "a//x (empty component)"},
		{"name-trailing-slash", "a/", "a/ (trailing slash)"},
		{"name-nul", "a\x00b", "a NUL byte in a name"},
		{"name-not-utf8", "\xff\xfe", "a name that is not UTF-8"},
	} {
		add(v.name, ErrInsecurePath, StageOpen, "entry name "+v.doc, sortedWith(fileEntry(v.entry)))
	}
	add("name-component-256", ErrInsecurePath, StageOpen, "a name component of 256 bytes",
		sortedWith(fileEntry(string(bytes.Repeat([]byte("n"), 256)))))
	add("name-reserved-marker", ErrFormat, StageOpen, "a top-level file named .kbundle-installed (reserved: kbundle's install marker)",
		sortedWith(fileEntry(".kbundle-installed")))
	add("name-reserved-marker-dir", ErrFormat, StageOpen, "a top-level directory named .kbundle-installed (reserved: kbundle's install marker)",
		sortedWith(raw.Entry{Name: ".kbundle-installed", Kind: raw.KindDir, Mode: 0o755}))
	add("name-reserved-temporary", ErrFormat, StageOpen, "a top-level file named .kbundle-temporary (reserved: the lock file of kbundle's temporary trees)",
		sortedWith(fileEntry(".kbundle-temporary")))
	addOK("valid-nested-marker-name", "a file named .kbundle-installed below the top (only the top-level name is reserved)",
		Meta, []raw.File{
			{Name: "d", Dir: true, Mode: 0o755, Sec: 1700000000},
			{Name: "d/.kbundle-installed", Mode: 0o644, Sec: 1700000000, Data: []byte("not a marker\n")},
		})

	for _, v := range vs {
		if len(v.Data) >= 4096 {
			panic("vectors: " + v.Name + " is not tiny")
		}
	}
	return vs
}

// movedMeta is Meta of another origin, pack host and time.
func movedMeta() []raw.Meta {
	m := slices.Clone(Meta)
	for i := range m {
		switch m[i].Key {
		case "origin":
			m[i].Value = "/elsewhere/cache"
		case "content_time":
			m[i].Value = "2031-01-02T03:04:05Z"
		case "host.arch":
			m[i].Value = "arm64"
		}
	}
	return m
}

// movedFiles is basicFiles with other mtimes.
func movedFiles() []raw.File {
	fs := basicFiles()
	for i := range fs {
		fs[i].Sec += 86400
		fs[i].Nsec = 0
	}
	return fs
}

// ContentDigests returns content-digests.tsv: the content digest
// (docs/FORMAT.md, "Content digest") of every valid vector, computed by
// raw.ContentDigest from the specification.
func ContentDigests(vs []Vector) []byte {
	var b bytes.Buffer
	b.WriteString("# file\tcontent digest (docs/FORMAT.md, \"Content digest\"), computed by bundle/internal/gen/raw\n")
	b.WriteString("# generated by `go run ./bundle/internal/gen`; do not edit\n")
	for _, v := range vs {
		if v.Want != OK {
			continue
		}
		d := raw.ContentDigest(raw.Build(v.SegmentSize, v.Meta, v.Files).Entries)
		b.WriteString(v.Name + ".kbundle\txxh3-128:" + hex.EncodeToString(d[:]) + "\n")
	}
	return b.Bytes()
}

// TSV returns vectors.tsv: one line per vector, "file<TAB>outcome<TAB>stage<TAB>description".
func TSV(vs []Vector) []byte {
	var b bytes.Buffer
	b.WriteString("# file\toutcome\tstage\tdescription\n")
	b.WriteString("# outcome: ok or the bundle sentinel error; stage: open (NewReader fails), verify (NewReader succeeds, Verify fails), - (ok: opens, verifies, extracts)\n")
	b.WriteString("# generated by `go run ./bundle/internal/gen`; do not edit\n")
	for _, v := range vs {
		b.WriteString(v.Name + ".kbundle\t" + v.Want + "\t" + v.Stage + "\t" + v.Doc + "\n")
	}
	return b.Bytes()
}
