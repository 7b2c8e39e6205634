package preset

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/kbundle/kbundle/bundle"
)

// GPU architectures of cache entries, for load's filter (docs/presets.md,
// "GPU architectures"). An architecture is written backend:arch, as
// Triton's target is: "cuda:90" (compute capability 9.0), "hip:gfx90a".

// AllGPUArchs asks a load to install the entries of every architecture.
const AllGPUArchs = "all"

// ErrGPUArch is wrapped by ParseGPUArch for a value it cannot read.
var ErrGPUArch = errors.New("not a GPU architecture")

var (
	cudaArchRE = regexp.MustCompile(`^(?:cuda:|sm_?|compute_)?([1-9][0-9]{1,2})[a-z]?$`)
	ccRE       = regexp.MustCompile(`^([1-9][0-9]?)\.([0-9])$`)
	hipArchRE  = regexp.MustCompile(`^(?:hip:)?(gfx[0-9a-f]{3,5})(?::.*)?$`)
)

// ParseGPUArch reads an architecture as a user writes it (--gpu-arch,
// KBUNDLE_GPU_ARCH) or nvidia-smi prints a compute capability: "90",
// "sm_90", "sm90", "sm_90a", "9.0" and "cuda:90" are "cuda:90"; "gfx90a"
// and "hip:gfx90a" are "hip:gfx90a"; "all" is AllGPUArchs.
func ParseGPUArch(s string) (string, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	if v == AllGPUArchs {
		return v, nil
	}
	if m := ccRE.FindStringSubmatch(v); m != nil {
		return "cuda:" + m[1] + m[2], nil
	}
	if m := cudaArchRE.FindStringSubmatch(v); m != nil {
		return "cuda:" + m[1], nil
	}
	if m := hipArchRE.FindStringSubmatch(v); m != nil {
		return "hip:" + m[1], nil
	}
	return "", fmt.Errorf("%w: %q (want a compute capability such as 9.0 or sm_90, an AMD gfx name such as gfx90a, or all)", ErrGPUArch, s)
}

// GPUArchOf is the architecture of a GPU of compute capability cc, as
// hostinfo records it ("9.0"): "cuda:90"; "" when cc says nothing.
func GPUArchOf(cc string) string {
	a, err := ParseGPUArch(cc)
	if err != nil || a == AllGPUArchs {
		return ""
	}
	return a
}

// smDirRE and smCubinRE find an architecture a name states: a directory named sm_NN, or
// a cubin (machine code for one architecture) named with sm_NN.
var (
	smDirRE   = regexp.MustCompile(`^sm_?([1-9][0-9]{1,2})[a-z]?$`)
	smCubinRE = regexp.MustCompile(`(?:^|[._-])sm_?([1-9][0-9]{1,2})[a-z]?(?:[._-]|$)`)
)

// nameArch is the architecture name states, or "".
func nameArch(name string) string {
	base := path.Base(name)
	for _, c := range strings.Split(path.Dir(name), "/") {
		if m := smDirRE.FindStringSubmatch(c); m != nil {
			return "cuda:" + m[1]
		}
	}
	if m := smDirRE.FindStringSubmatch(base); m != nil {
		return "cuda:" + m[1] // the directory itself
	}
	if stem, ok := strings.CutSuffix(base, ".cubin"); ok {
		if m := smCubinRE.FindStringSubmatch(stem); m != nil {
			return "cuda:" + m[1]
		}
	}
	return ""
}

// isCuPyCubin: a kernel in CuPy's cache (the cupy preset's directory).
func isCuPyCubin(name string) bool {
	return strings.HasSuffix(name, ".cubin") && (strings.HasPrefix(name, "cupy/") || strings.Contains(name, "/cupy/"))
}

// HasGPUUnits reports whether names (a set's view) hold entries whose
// architecture GPUTargets can read or their names state: Triton's hash
// directories, CuPy's cubins, sm_NN names. It reads names only.
func HasGPUUnits(names []string) bool {
	for _, n := range names {
		if bundle.TritonUnit(bundle.CacheUnit(n)) || isCuPyCubin(n) || nameArch(n) != "" {
			return true
		}
	}
	return false
}

// maxTargetFile bounds a Triton metadata file read for its target.
const maxTargetFile = 1 << 20

// GPUTargets reads the architecture of cache units from what the
// frameworks write in them, for the files of a cache (names sorted, as a
// set's view is) that open opens: Triton's kernel metadata (UNIT/NAME.json,
// not the __grp__ group files: {"target": {"backend": "cuda", "arch":
// 90}}) and the ELF header of CuPy's cubins (EM_CUDA; the SM number in
// e_flags, where LLVM's BinaryFormat/ELF.h puts it for either CUDA ELF
// ABI). It returns unit (bundle.CacheUnit of a file) → architecture for
// the units it could tell; a file it cannot read or parse tells nothing.
func GPUTargets(files []string, open func(name string) (io.ReadCloser, error)) map[string]string {
	out := map[string]string{}
	for _, n := range files {
		unit := bundle.CacheUnit(n)
		switch base := path.Base(n); {
		case bundle.TritonUnit(unit):
			if _, done := out[unit]; done || !strings.HasSuffix(base, ".json") || strings.HasPrefix(base, "__grp__") {
				continue
			}
			if a := readTarget(open, n, tritonTarget); a != "" {
				out[unit] = a
			}
		case isCuPyCubin(n):
			if a := readTarget(open, n, cubinTarget); a != "" {
				out[unit] = a
			}
		}
	}
	return out
}

func readTarget(open func(string) (io.ReadCloser, error), name string, parse func([]byte) string) string {
	f, err := open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTargetFile+1))
	if err != nil || len(b) > maxTargetFile {
		return ""
	}
	return parse(b)
}

// tritonTarget is the target of a Triton kernel's metadata.
func tritonTarget(b []byte) string {
	var m struct {
		Target *struct {
			Backend string          `json:"backend"`
			Arch    json.RawMessage `json:"arch"`
		} `json:"target"`
	}
	if json.Unmarshal(b, &m) != nil || m.Target == nil || m.Target.Backend == "" {
		return ""
	}
	var arch string
	if n, err := strconv.Atoi(string(m.Target.Arch)); err == nil {
		arch = strconv.Itoa(n)
	} else if json.Unmarshal(m.Target.Arch, &arch) != nil || arch == "" {
		return ""
	}
	if m.Target.Backend == "hip" {
		arch, _, _ = strings.Cut(arch, ":") // gfx90a:sramecc+:xnack-
	}
	return m.Target.Backend + ":" + arch
}

// The CUDA ELF header: EM_CUDA, and the ABI version from which the SM
// number sits in bits 8-15 of e_flags (LLVM: ELFABIVERSION_CUDA_V2,
// EF_CUDA_SM_MASK); before, in the low byte (EF_CUDA_SM).
const (
	emCUDA         = 190
	elfABICUDAV2   = 8
	maxELFLeadByte = 128 // CuPy writes a hex digest before the cubin
)

// cubinTarget is the architecture of a cubin in CuPy's cache file (its
// digest, then the ELF image), or "".
func cubinTarget(b []byte) string {
	i := bytes.Index(b[:min(len(b), maxELFLeadByte+4)], []byte("\x7fELF"))
	if i < 0 {
		return ""
	}
	h := b[i:]
	if len(h) < 52 {
		return ""
	}
	if binary.LittleEndian.Uint16(h[18:]) != emCUDA {
		return ""
	}
	var flags uint32
	switch h[4] { // EI_CLASS
	case 2:
		if len(h) < 64 {
			return ""
		}
		flags = binary.LittleEndian.Uint32(h[48:])
	case 1:
		flags = binary.LittleEndian.Uint32(h[36:])
	default:
		return ""
	}
	sm := flags & 0xff
	if h[8] >= elfABICUDAV2 {
		sm = (flags >> 8) & 0xff
	}
	if sm < 20 {
		return ""
	}
	return fmt.Sprintf("cuda:%d", sm)
}

// GPUFilter is the predicate load gives bundle.ExtractOptions.Skip on a
// node of architecture target: it leaves out an entry whose architecture
// is known (its name states it, or targets, from GPUTargets, knows its
// unit) and is not target. Entries of no known architecture stay.
func GPUFilter(targets map[string]string, target string) func(name string) bool {
	return func(name string) bool {
		a := EntryGPUArch(targets, name)
		return a != "" && a != target
	}
}

// EntryGPUArch is the architecture of the entry name: the one its name
// states, else its unit's in targets (GPUTargets); "" when not known.
func EntryGPUArch(targets map[string]string, name string) string {
	if a := nameArch(name); a != "" {
		return a
	}
	if a, ok := targets[name+"/"]; ok { // a Triton hash directory itself
		return a
	}
	return targets[bundle.CacheUnit(name)]
}
