package bundle

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Format constants; see docs/FORMAT.md.
const (
	Version     = 1
	headerSize  = 16
	trailerSize = 56

	// Limits, checked before any allocation.
	MaxIndexLen        = 1 << 30
	MaxEntries         = 1 << 22
	MaxNameLen         = 4096
	MaxComponentLen    = 255
	MaxMeta            = 256
	MaxMetaKeyLen      = 128
	MaxMetaValueLen    = 1 << 16
	MinSegmentSize     = 64 << 10
	MaxSegmentSize     = 64 << 20
	MaxDataLen         = 1 << 44
	DefaultSegmentSize = 8 << 20 // raw bytes per segment when none is given

	kindDir  = 1
	kindFile = 2

	// smallest encodings, used to bound counts by the bytes left
	minEntrySize = 2 + 1 + 1 + 2 + 8 + 4
	minMetaSize  = 2 + 1 + 4
)

var (
	magic    = [8]byte{0x89, 'K', 'B', 'N', 'D', 'L', '\r', '\n'}
	endMagic = [8]byte{'K', 'B', 'N', 'D', 'E', 'N', 'D', '\n'}
)

// maxPacked bounds a segment's compressed length for a segment size.
func maxPacked(segSize int64) int64 { return segSize + segSize/128 + 4096 }

// Digest is an XXH3-128 digest in canonical byte order.
type Digest [16]byte

func (d Digest) String() string { return hex.EncodeToString(d[:]) }

func sum(b []byte) Digest { return Digest(xxh3.Hash128(b).Bytes()) }

// newHasher returns a streaming XXH3-128 hasher.
func newHasher() *xxh3.Hasher { return xxh3.New() }

func hasherDigest(h *xxh3.Hasher) Digest { return Digest(h.Sum128().Bytes()) }

var emptyDigest = sum(nil)

// Metadata keys written by kbundle (docs/FORMAT.md, "Metadata").
const (
	MetaOrigin      = "origin"       // absolute path of the packed directory
	MetaContentTime = "content_time" // newest mtime in the tree, or SOURCE_DATE_EPOCH
	MetaCreator     = "creator"      // "kbundle VERSION"
	MetaPreset      = "preset"       // comma-separated presets of the warm-up
)

// Metadata keys describing the warm-up machine (docs/FORMAT.md); a loader
// compares them with the machine it loads on. All are optional.
const (
	MetaHostOS     = "host.os"         // runtime.GOOS
	MetaHostArch   = "host.arch"       // runtime.GOARCH
	MetaHostKernel = "host.kernel"     // kernel release
	MetaCPUModel   = "host.cpu_model"  // CPU model name
	MetaCPUFlags   = "host.cpu_flags"  // sorted CPU feature flags
	MetaGPUModel   = "gpu.model"       // first GPU's name (nvidia-smi)
	MetaGPUCompute = "gpu.compute_cap" // its compute capability
	MetaGPUDriver  = "gpu.driver"      // its driver version
)

// Metadata keys naming the toolchain of the warm-up (docs/FORMAT.md): the
// versions the frameworks' caches key on, read where the bundle (or a
// set's layer) was made. All are optional; which one decides reuse for
// which preset is the preset package's rule table (docs/presets.md).
const (
	MetaPython      = "toolchain.python"       // Python version, X.Y.Z
	MetaPythonPath  = "toolchain.python_path"  // the interpreter asked
	MetaNumba       = "toolchain.numba"        // numba's version
	MetaLLVMLite    = "toolchain.llvmlite"     // llvmlite's
	MetaNumbaCUDA   = "toolchain.numba_cuda"   // numba-cuda's
	MetaJAX         = "toolchain.jax"          // jax's
	MetaJAXLib      = "toolchain.jaxlib"       // jaxlib's
	MetaTorch       = "toolchain.torch"        // torch's
	MetaTorchCUDA   = "toolchain.torch_cuda"   // the CUDA torch was built with (torch.version.cuda)
	MetaTriton      = "toolchain.triton"       // triton's (or pytorch-triton's)
	MetaPyOpenCL    = "toolchain.pyopencl"     // pyopencl's
	MetaCuPy        = "toolchain.cupy"         // cupy's (any cupy-cudaXXx wheel)
	MetaFlashInfer  = "toolchain.flashinfer"   // flashinfer's (flashinfer-python)
	MetaDeepGEMM    = "toolchain.deep_gemm"    // deep_gemm's
	MetaTileLang    = "toolchain.tilelang"     // tilelang's
	MetaVLLM        = "toolchain.vllm"         // vllm's
	MetaSGLang      = "toolchain.sglang"       // sglang's
	MetaCXX         = "toolchain.cxx"          // the C++ compiler Inductor runs: $CXX, else g++
	MetaCXXVersion  = "toolchain.cxx_version"  // the first line of its --version
	MetaCUDARuntime = "toolchain.cuda_runtime" // CUDA runtime version, when present
	MetaROCm        = "toolchain.rocm"         // ROCm version, when present
)

// unixToInternal is the seconds from year 1 to 1970: a time.Time counts
// from year 1 in an int64, so later Unix times do not fit.
const unixToInternal = (1969*365 + 1969/4 - 1969/100 + 1969/400) * 86400

// Entry describes one directory or regular file of a bundle.
type Entry struct {
	Name    string      // slash-separated, relative
	Dir     bool        // a directory; else a regular file
	Mode    fs.FileMode // permission bits only
	Size    int64       // content length (0 for directories)
	ModTime time.Time   // with nanoseconds
	Digest  Digest      // content digest (zero for directories)
	offset  int64       // blob offset in the data stream
}

// checkName enforces the Names rules of docs/FORMAT.md.
func checkName(name string) error {
	switch {
	case name == InstalledMarker:
		// Extraction writes the marker itself; a bundle's own would be
		// truncated into it (root) or stop the extraction (S13).
		return errf(ErrFormat, "the top-level name %s is reserved for kbundle's install marker", InstalledMarker)
	case name == tempMarker:
		// The lock file at the top of every temporary tree, made before
		// extraction starts: a bundle's own would stop the extraction.
		return errf(ErrFormat, "the top-level name %s is reserved for the lock file of kbundle's temporary trees", tempMarker)
	case name == "" || name == ".":
		return errf(ErrInsecurePath, "empty name")
	case len(name) > MaxNameLen:
		return errf(ErrInsecurePath, "name longer than %d bytes", MaxNameLen)
	case !utf8.ValidString(name):
		return errf(ErrInsecurePath, "%q is not valid UTF-8", name)
	case strings.ContainsAny(name, "\\\x00"):
		return errf(ErrInsecurePath, "%q contains a backslash or NUL", name)
	case !fs.ValidPath(name):
		return errf(ErrInsecurePath, "%q is not a clean relative path", name)
	}
	for c := range strings.SplitSeq(name, "/") {
		if len(c) > MaxComponentLen {
			return errf(ErrInsecurePath, "%q has a component longer than %d bytes", name, MaxComponentLen)
		}
	}
	return nil
}

func checkMetaKey(k string) error {
	if k == "" || len(k) > MaxMetaKeyLen {
		return errf(ErrFormat, "metadata key %q: length must be 1..%d", k, MaxMetaKeyLen)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return errf(ErrFormat, "metadata key %q: only a-z 0-9 . _ - allowed", k)
		}
	}
	return nil
}

func checkMetaValue(k, v string) error {
	if len(v) > MaxMetaValueLen {
		return errf(ErrTooLarge, "metadata %q: value longer than %d bytes", k, MaxMetaValueLen)
	}
	if !utf8.ValidString(v) {
		return errf(ErrFormat, "metadata %q: value is not valid UTF-8", k)
	}
	return nil
}

// index is the decoded index.
type index struct {
	segSize  int64
	dataLen  int64
	packed   []int64 // compressed length per segment
	meta     map[string]string
	metaKeys []string
	entries  []Entry
}

func segCount(dataLen, segSize int64) int64 { return (dataLen + segSize - 1) / segSize }

// appendIndex encodes ix canonically; ix.entries and metaKeys must be sorted.
func appendIndex(b []byte, ix *index) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(ix.segSize))
	b = le.AppendUint64(b, uint64(ix.dataLen))
	b = le.AppendUint32(b, uint32(len(ix.packed)))
	for _, p := range ix.packed {
		b = le.AppendUint32(b, uint32(p))
	}
	b = le.AppendUint32(b, uint32(len(ix.metaKeys)))
	for _, k := range ix.metaKeys {
		v := ix.meta[k]
		b = le.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = le.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	b = le.AppendUint32(b, uint32(len(ix.entries)))
	for i := range ix.entries {
		e := &ix.entries[i]
		b = le.AppendUint16(b, uint16(len(e.Name)))
		b = append(b, e.Name...)
		kind := byte(kindFile)
		if e.Dir {
			kind = kindDir
		}
		b = append(b, kind)
		b = le.AppendUint16(b, uint16(e.Mode.Perm()))
		b = le.AppendUint64(b, uint64(e.ModTime.Unix()))
		b = le.AppendUint32(b, uint32(e.ModTime.Nanosecond()))
		if !e.Dir {
			b = le.AppendUint64(b, uint64(e.Size))
			b = le.AppendUint64(b, uint64(e.offset))
			b = append(b, e.Digest[:]...)
		}
	}
	return b
}

// idxDecoder reads little-endian fields with sticky bounds errors.
type idxDecoder struct {
	b   []byte
	err error
}

func (d *idxDecoder) need(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = errf(ErrFormat, "index ends early")
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *idxDecoder) u8() byte {
	if p := d.need(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *idxDecoder) u16() uint16 {
	if p := d.need(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (d *idxDecoder) u32() uint32 {
	if p := d.need(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *idxDecoder) u64() uint64 {
	if p := d.need(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// count reads a u32 count and checks it against max and against the bytes
// left (each item takes at least minSize), before anything is allocated.
func (d *idxDecoder) count(what string, max, minSize int) int {
	n := d.u32()
	if d.err != nil {
		return 0
	}
	if uint64(n) > uint64(max) {
		d.err = errf(ErrTooLarge, "%d %s (limit %d)", n, what, max)
		return 0
	}
	if uint64(n)*uint64(minSize) > uint64(len(d.b)) {
		d.err = errf(ErrFormat, "%d %s do not fit in the index", n, what)
		return 0
	}
	return int(n)
}

// parseIndex decodes and fully validates an index (every canonical rule).
func parseIndex(b []byte) (*index, error) {
	d := &idxDecoder{b: b}
	ix := &index{meta: map[string]string{}}
	ix.segSize = int64(d.u32())
	ix.dataLen = int64(d.u64())
	if d.err != nil {
		return nil, d.err
	}
	if ix.segSize > MaxSegmentSize {
		return nil, errf(ErrTooLarge, "segment size %d (limit %d)", ix.segSize, MaxSegmentSize)
	}
	if ix.segSize < MinSegmentSize {
		return nil, errf(ErrFormat, "segment size %d below the minimum %d", ix.segSize, MinSegmentSize)
	}
	if uint64(ix.dataLen) > MaxDataLen {
		return nil, errf(ErrTooLarge, "data length %d (limit %d)", uint64(ix.dataLen), uint64(MaxDataLen))
	}
	nseg := d.count("segments", math.MaxInt32, 4)
	if d.err == nil && int64(nseg) != segCount(ix.dataLen, ix.segSize) {
		return nil, errf(ErrFormat, "%d segments for %d bytes of %d", nseg, ix.dataLen, ix.segSize)
	}
	ix.packed = make([]int64, nseg)
	for i := range ix.packed {
		p := int64(d.u32())
		if d.err == nil && p > maxPacked(ix.segSize) {
			return nil, errf(ErrTooLarge, "segment %d: packed length %d (limit %d)", i, p, maxPacked(ix.segSize))
		}
		if d.err == nil && p == 0 {
			return nil, errf(ErrFormat, "segment %d: packed length 0", i)
		}
		ix.packed[i] = p
	}
	nmeta := d.count("metadata pairs", MaxMeta, minMetaSize)
	for i := 0; i < nmeta && d.err == nil; i++ {
		kl := int(d.u16())
		if d.err == nil && kl > MaxMetaKeyLen {
			return nil, errf(ErrTooLarge, "metadata key of %d bytes (limit %d)", kl, MaxMetaKeyLen)
		}
		k := string(d.need(kl))
		vl := d.u32()
		if d.err == nil && vl > MaxMetaValueLen {
			return nil, errf(ErrTooLarge, "metadata %q: value of %d bytes (limit %d)", k, vl, MaxMetaValueLen)
		}
		v := string(d.need(int(vl)))
		if d.err != nil {
			break
		}
		if err := checkMetaKey(k); err != nil {
			return nil, err
		}
		if err := checkMetaValue(k, v); err != nil {
			return nil, err
		}
		if i > 0 && k <= ix.metaKeys[i-1] {
			return nil, errf(ErrFormat, "metadata key %q out of order or repeated", k)
		}
		ix.metaKeys = append(ix.metaKeys, k)
		ix.meta[k] = v
	}
	nent := d.count("entries", MaxEntries, minEntrySize)
	if d.err != nil {
		return nil, d.err
	}
	ix.entries = make([]Entry, 0, nent)
	for i := 0; i < nent; i++ {
		nl := int(d.u16())
		if d.err == nil && nl > MaxNameLen {
			return nil, errf(ErrTooLarge, "entry %d: name of %d bytes (limit %d)", i, nl, MaxNameLen)
		}
		name := string(d.need(nl))
		kind := d.u8()
		mode := d.u16()
		sec := int64(d.u64())
		nsec := d.u32()
		if d.err != nil {
			return nil, d.err
		}
		if err := checkName(name); err != nil {
			err.(*Error).Entry = name
			return nil, err
		}
		if i > 0 && name <= ix.entries[i-1].Name {
			return nil, &Error{Entry: name, Err: ErrInsecurePath, Msg: "duplicate or out-of-order name"}
		}
		if mode > 0o777 {
			return nil, &Error{Entry: name, Err: ErrFormat, Msg: "mode has bits beyond 0777 (setuid, setgid or sticky)"}
		}
		if nsec >= 1e9 {
			return nil, &Error{Entry: name, Err: ErrFormat, Msg: "mtime nanoseconds out of range"}
		}
		mt := time.Unix(sec, int64(nsec))
		if sec > math.MaxInt64-unixToInternal {
			// Beyond what a time.Time holds (about ±292 billion years):
			// refused rather than wrapped into another date.
			return nil, &Error{Entry: name, Err: ErrFormat, Msg: fmt.Sprintf("mtime %d s is out of range", sec)}
		}
		e := Entry{Name: name, Mode: fs.FileMode(mode), ModTime: mt}
		switch kind {
		case kindDir:
			e.Dir = true
		case kindFile:
			e.Size = int64(d.u64())
			e.offset = int64(d.u64())
			copy(e.Digest[:], d.need(16))
			if d.err != nil {
				return nil, d.err
			}
			if e.Size < 0 || e.offset < 0 || e.Size > ix.dataLen || e.offset > ix.dataLen-e.Size {
				return nil, &Error{Entry: name, Err: ErrFormat, Msg: "content lies outside the data stream"}
			}
		default:
			return nil, &Error{Entry: name, Err: ErrFormat, Msg: "unknown kind " + strconv.Itoa(int(kind))}
		}
		ix.entries = append(ix.entries, e)
	}
	if len(d.b) != 0 {
		return nil, errf(ErrFormat, "%d bytes of slack after the index", len(d.b))
	}
	if err := checkTree(ix.entries); err != nil {
		return nil, err
	}
	if err := checkBlobs(ix.entries, ix.dataLen); err != nil {
		return nil, err
	}
	return ix, nil
}

// checkTree requires every entry's parent to be a directory entry.
func checkTree(entries []Entry) error {
	dirs := make(map[string]bool)
	for i := range entries {
		if entries[i].Dir {
			dirs[entries[i].Name] = true
		}
	}
	for i := range entries {
		if p := path.Dir(entries[i].Name); p != "." && !dirs[p] {
			return &Error{Entry: entries[i].Name, Err: ErrFormat, Msg: "parent directory is not an entry"}
		}
	}
	return nil
}

// checkBlobs enforces that blobs tile the data stream exactly and that
// identical contents are stored once.
func checkBlobs(entries []Entry, dataLen int64) error {
	type blob struct {
		size   int64
		digest Digest
		name   string
	}
	byOff := make(map[int64]blob)
	digests := make(map[Digest]int64)
	for i := range entries {
		e := &entries[i]
		if e.Dir {
			continue
		}
		if e.Size == 0 {
			if e.offset != 0 || e.Digest != emptyDigest {
				return &Error{Entry: e.Name, Err: ErrFormat, Msg: "empty file with an offset or a wrong digest"}
			}
			continue
		}
		if b, ok := byOff[e.offset]; ok {
			if b.size != e.Size || b.digest != e.Digest {
				return &Error{Entry: e.Name, Err: ErrFormat, Msg: "shares its content offset with " + b.name + " but not its size and digest"}
			}
			continue
		}
		if off, ok := digests[e.Digest]; ok && off != e.offset {
			return &Error{Entry: e.Name, Err: ErrFormat, Msg: "identical content stored twice"}
		}
		digests[e.Digest] = e.offset
		byOff[e.offset] = blob{e.Size, e.Digest, e.Name}
	}
	offs := make([]int64, 0, len(byOff))
	for o := range byOff {
		offs = append(offs, o)
	}
	slices.Sort(offs)
	var end int64
	for _, o := range offs {
		if o != end {
			return errf(ErrFormat, "data stream has a gap or overlap at offset %d", end)
		}
		end = o + byOff[o].size
	}
	if end != dataLen {
		return errf(ErrFormat, "blobs cover %d of %d data bytes", end, dataLen)
	}
	return nil
}
