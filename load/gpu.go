package load

import (
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
)

// nodeInfo is Plan.HostInfo's description of this node, asked once (nil
// without HostInfo).
func (l *leader) nodeInfo() map[string]string {
	if !l.infoDone {
		l.infoDone = true
		if l.plan.HostInfo != nil {
			l.info = l.plan.HostInfo()
		}
	}
	return l.info
}

// target is the GPU architecture this node's entries are filtered for:
// Plan.GPUArch, else its GPU's (from HostInfo's compute capability); ""
// when it sees none.
func (l *leader) target() string {
	if l.plan.GPUArch != "" {
		return l.plan.GPUArch
	}
	return preset.GPUArchOf(l.nodeInfo()[bundle.MetaGPUCompute])
}

// filterName is how the install record names the filter for target.
func filterName(target string) string { return "gpu-arch " + target }

// maxTargetTable bounds the table of architectures rank 0 sends; a set
// whose table is larger is not filtered by what its files say (names
// still are).
const maxTargetTable = 64 << 20

// gpuFilter runs on the leaders that stream, before the stream, when the
// set holds entries of GPU architectures (Triton's hash directories,
// CuPy's cubins, sm_NN names: setInfo.gpu): each leader decides its
// architecture; when some leader filters, rank 0 reads the architecture
// of each cache unit from the files (preset.GPUTargets: Triton's metadata,
// the cubins' ELF headers) and sends the table; each filtering leader then
// stages with a Skip predicate that leaves out the other architectures'
// entries. A leader that sees no GPU installs every architecture
// (allArchs). A returned error matches broadcast.ErrComm.
func (l *leader) gpuFilter(group broadcast.Comm, set *bundle.OpenedSet) error {
	if !l.gpuUnits {
		return nil
	}
	t := l.target()
	l.sum.GPUArch = t
	filters := t != "" && t != preset.AllGPUArchs
	l.allArchs = t == ""
	var want int64
	if filters {
		want = 1
	}
	any, err := group.AllreduceInt64(want, mpi.Max)
	if err != nil {
		return commErr("GPU architectures", err)
	}
	if any == 0 {
		return nil
	}
	var table []byte
	if group.Rank() == 0 && set != nil {
		table = encodeTargets(setTargets(set))
		if len(table) > maxTargetTable {
			table = nil
		}
	}
	if table, err = broadcast.BcastBytes(group, table, maxTargetTable); err != nil {
		return commErr("GPU architectures", err)
	}
	if !filters {
		return nil
	}
	targets := decodeTargets(table)
	l.skippedArchs = map[string]bool{}
	l.skip = func(name string) bool {
		a := preset.EntryGPUArch(targets, name)
		if a == "" || a == t {
			return false
		}
		l.skippedArchs[a] = true
		return true
	}
	return nil
}

// setTargets is the architecture of each cache unit of the set's merged
// view, read from the files of the layer each comes from.
func setTargets(set *bundle.OpenedSet) map[string]string {
	layer := map[string]int{}
	var names []string
	for _, e := range set.Merged(bundle.CacheUnit) {
		if !e.Dir {
			names = append(names, e.Name)
			layer[e.Name] = e.Layer
		}
	}
	return preset.GPUTargets(names, func(n string) (io.ReadCloser, error) {
		return set.Read[layer[n]].Open(n)
	})
}

// encodeTargets is the table of architectures, sorted by unit: for each,
// the unit's and the architecture's lengths (uvarint) and bytes.
func encodeTargets(t map[string]string) []byte {
	units := slices.Sorted(maps.Keys(t))
	var b []byte
	for _, u := range units {
		b = binary.AppendUvarint(b, uint64(len(u)))
		b = append(b, u...)
		b = binary.AppendUvarint(b, uint64(len(t[u])))
		b = append(b, t[u]...)
	}
	return b
}

// decodeTargets undoes encodeTargets; what does not decode is left out.
func decodeTargets(b []byte) map[string]string {
	out := map[string]string{}
	next := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	for len(b) > 0 {
		u, ok := next()
		if !ok {
			break
		}
		a, ok := next()
		if !ok {
			break
		}
		out[u] = a
	}
	return out
}

// filtered fills the summary with what this node's filter left out.
func (l *leader) filtered(res *bundle.ExtractResult) {
	if l.skip == nil || res == nil {
		return
	}
	l.sum.Skipped, l.sum.SkippedBytes = res.Skipped, res.SkippedBytes
	if res.Skipped > 0 {
		l.sum.SkippedArchs = slices.Sorted(maps.Keys(l.skippedArchs))
	}
}

// checkHost compares this node with the warm-up machine by the presets'
// rules (preset.Misses): the hardware HostInfo describes, and the
// toolchain keys the bundle records and the rules compare, read with
// Plan.Toolchain. What it could not read is said (ToolchainError,
// NotHere).
func (l *leader) checkHost(k *sink) error {
	if k.s == nil || (l.plan.HostInfo == nil && l.plan.Toolchain == nil) {
		return nil
	}
	meta := k.s.Meta()
	local := maps.Clone(l.nodeInfo())
	if local == nil {
		local = map[string]string{}
	}
	if keys := preset.CompareKeys(l.presets, meta); len(keys) > 0 && l.plan.Toolchain != nil {
		tc, err := l.plan.Toolchain(keys)
		maps.Copy(local, tc)
		l.sum.PythonPath = tc[bundle.MetaPythonPath]
		if err != nil {
			l.sum.ToolchainError = err.Error()
		}
		for _, key := range keys {
			if _, ok := local[key]; !ok && (err == nil || !pythonKey(key)) {
				l.sum.NotHere = append(l.sum.NotHere, preset.Noun(key)+" "+meta[key])
			}
		}
		sort.Strings(l.sum.NotHere)
	}
	l.sum.Misses = preset.Misses(l.presets, meta, local)
	for _, m := range l.sum.Misses {
		l.sum.MismatchKeys = append(l.sum.MismatchKeys, mismatchKey(m))
	}
	return nil
}

// pythonKey: a key read by asking Python (not the compiler's, the CUDA
// toolkit's or ROCm's).
func pythonKey(key string) bool {
	switch key {
	case bundle.MetaCXX, bundle.MetaCXXVersion, bundle.MetaCUDARuntime, bundle.MetaROCm:
		return false
	}
	return true
}

// mismatchKey is a miss as Summary.MismatchKeys says it: "key: warmed on
// X, here Y".
func mismatchKey(m preset.Miss) string {
	switch m.Compare {
	case "isa", "isa_lacking":
		s := m.Key + ": this node"
		if m.Warmed != "" {
			s += " lacks " + m.Warmed
		}
		if m.Here != "" {
			if m.Warmed != "" {
				s += " and"
			}
			s += " has " + m.Here
		}
		return s
	case "vector_isa":
		return fmt.Sprintf("%s: warmed on vector ISA %q, here %q", m.Key, m.Warmed, m.Here)
	}
	return fmt.Sprintf("%s: warmed on %q, here %q", m.Key, m.Warmed, m.Here)
}
