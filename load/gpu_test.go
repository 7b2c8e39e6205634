package load_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/preset"
)

// tritonUnit is a kernel as Triton writes it: TRITON_CACHE_DIR/KEY/ with
// the kernel's files, its metadata naming the target, and the group file
// naming the children by absolute path (under origin).
func tritonUnit(files map[string][]byte, origin, key string, arch int) {
	dir := "triton/" + key + "/"
	files[dir+"add_kernel.cubin"] = []byte(fmt.Sprintf("cubin for sm_%d", arch))
	files[dir+"add_kernel.ptx"] = []byte(fmt.Sprintf(".target sm_%d", arch))
	files[dir+"add_kernel.json"] = []byte(fmt.Sprintf(`{"hash": "%s", "target": {"backend": "cuda", "arch": %d, "warp_size": 32}, "num_warps": 4, "name": "add_kernel"}`, key, arch))
	files[dir+"__grp__add_kernel.json"] = []byte(fmt.Sprintf(`{"child_paths": {"add_kernel.cubin": "%s/triton/%s/add_kernel.cubin", "add_kernel.json": "%s/triton/%s/add_kernel.json"}}`,
		origin, key, origin, key))
}

// cupyCubin is a kernel in CuPy's cache: a hex digest, then the cubin's
// ELF image (EM_CUDA, SM in e_flags' low byte: CUDA ELF ABI version 7).
func cupyCubin(sm uint32) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF")
	h[4], h[5], h[7], h[8] = 2, 1, 0x33, 7
	binary.LittleEndian.PutUint16(h[18:], 190)
	binary.LittleEndian.PutUint32(h[48:], sm|0x500)
	return append([]byte("0123456789abcdef0123456789abcdef"), append(h, "code"...)...)
}

// writeSet writes a bundle (the base, when path holds no set yet; else a
// layer) with files and meta.
func writeSet(t *testing.T, path string, files map[string][]byte, meta map[string]string) {
	t.Helper()
	if _, err := bundle.WriteLayer(context.Background(), path, nil, func(w *bundle.Writer) error {
		for k, v := range meta {
			w.SetMeta(k, v)
		}
		for n, c := range files {
			if err := w.WriteFile(n, 0o644, time.Unix(1e9, 0), c); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func gpu(cc string) func() map[string]string {
	return func() map[string]string {
		if cc == "" {
			return map[string]string{bundle.MetaHostArch: "amd64"} // Slurm's ConstrainDevices: no GPU seen
		}
		return map[string]string{bundle.MetaGPUModel: "NVIDIA Test", bundle.MetaGPUCompute: cc}
	}
}

// A set holding the kernels of two GPU architectures (as a set harvested
// on two partitions does): every node installs its own GPU's, a node
// that sees no GPU installs all, --gpu-arch chooses; what is left out is
// said, the install record describes what was installed, relocation
// applies to what is there, and loading again is a no-op.
func TestRunGPUArch(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "cache.kbundle")
	origin := "/warm/dir"
	k80a, k80b, k90 := strings.Repeat("E", 52), strings.Repeat("F", 52), strings.Repeat("G", 52)
	base := map[string][]byte{"numba/f.nbi": []byte("index"), "cupy/aa_2.cubin": cupyCubin(80), "cupy/bb_2.cubin": cupyCubin(90),
		"cuda/sm_80/kernel.cubin": []byte("80"), "cuda/sm_90/kernel.cubin": []byte("90"), "cuda/index": []byte("idx")}
	tritonUnit(base, origin, k80a, 80)
	tritonUnit(base, origin, k90, 90)
	writeSet(t, set, base, map[string]string{bundle.MetaOrigin: origin, bundle.MetaPreset: "triton,cupy"})
	layer := map[string][]byte{}
	tritonUnit(layer, origin, k80b, 80) // harvested on the sm_80 partition
	writeSet(t, set, layer, map[string]string{bundle.MetaOrigin: origin})
	s, err := bundle.OpenSet(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	setDigest := bundle.FormatDigest(s.ContentDigest(bundle.CacheUnit))
	s.Close()

	nodes := []int{0, 0, 1, 2, 3}
	root := t.TempDir()
	dest := func(n int) string { return filepath.Join(root, fmt.Sprintf("n%d", n), "dest") }
	infos := []func() map[string]string{gpu("9.0"), gpu("8.0"), gpu(""), gpu("8.0")}
	arch := []string{"", "", "", preset.AllGPUArchs} // node 3: --gpu-arch all
	plan := func(rank int) load.Plan {
		n := nodes[rank]
		return load.Plan{Bundle: set, Dest: dest(n), Host: fmt.Sprintf("kbn%d", n), UseRecorded: true, HostInfo: infos[n], GPUArch: arch[n], Window: 1, ChunkSize: 4093}
	}
	sums, errs := run(t, nodes, plan, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	units80 := []string{"triton/" + k80a, "triton/" + k80b, "cupy/aa_2.cubin", "cuda/sm_80"}
	units90 := []string{"triton/" + k90, "cupy/bb_2.cubin", "cuda/sm_90"}
	exists := func(n int, names []string, want bool) {
		t.Helper()
		for _, name := range names {
			if _, err := os.Lstat(filepath.Join(dest(n), name)); (err == nil) != want {
				t.Errorf("node %d: %s there: %v, want %v", n, name, err == nil, want)
			}
		}
	}
	common := []string{"numba/f.nbi", "cuda/index"}
	exists(0, append(units90, common...), true)
	exists(0, units80, false)
	exists(1, append(units80, common...), true)
	exists(1, units90, false)
	exists(2, append(append(units80, units90...), common...), true)
	exists(3, append(append(units80, units90...), common...), true)

	if s := sums[0]; s.GPUArch != "cuda:90" || s.Skipped != 2*5+1+2 || !reflect.DeepEqual(s.SkippedArchs, []string{"cuda:80"}) {
		t.Errorf("node 0 (sm_90): arch %q skipped %d %v", s.GPUArch, s.Skipped, s.SkippedArchs)
	}
	if s := sums[2]; s.GPUArch != "cuda:80" || s.Skipped != 5+1+2 || !reflect.DeepEqual(s.SkippedArchs, []string{"cuda:90"}) {
		t.Errorf("node 1 (sm_80): arch %q skipped %d %v", s.GPUArch, s.Skipped, s.SkippedArchs)
	}
	if s := sums[3]; s.GPUArch != "" || s.Skipped != 0 {
		t.Errorf("node 2 (no GPU): arch %q skipped %d", s.GPUArch, s.Skipped)
	}
	for r, s := range sums {
		if s.SkippedNodes != 2 || s.AllArchNodes != 1 || s.Entries != sums[0].Entries {
			t.Errorf("rank %d: %d nodes filtered, %d installed every architecture, %d entries", r, s.SkippedNodes, s.AllArchNodes, s.Entries)
		}
	}

	// The record describes the tree as installed; the group files of the
	// kept units name DEST.
	rec, err := bundle.ReadInstallRecord(dest(0))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Filter != "gpu-arch cuda:90" || rec.Skipped != sums[0].Skipped || rec.SetContentDigest != setDigest || rec.ContentDigest == setDigest {
		t.Errorf("node 0's record: filter %q skipped %d set %s content %s (the set's %s)", rec.Filter, rec.Skipped, rec.SetContentDigest, rec.ContentDigest, setDigest)
	}
	if ch, err := bundle.CompareTree(dest(0), rec); err != nil || !ch.Same() {
		t.Errorf("node 0's tree against its record: %v %v", ch, err)
	}
	grp, _ := os.ReadFile(filepath.Join(dest(0), "triton", k90, "__grp__add_kernel.json"))
	if !strings.Contains(string(grp), dest(0)+"/triton/"+k90+"/add_kernel.cubin") {
		t.Errorf("the kept unit's group file was not relocated: %s", grp)
	}
	if rec, _ := bundle.ReadInstallRecord(dest(2)); rec == nil || rec.Filter != "" || rec.ContentDigest != setDigest {
		t.Errorf("node 2's record: %+v", rec)
	}

	// Again: every node holds the set, the filtered ones for their GPU, and
	// also when the step sees no GPU (the tree was filtered for this node's).
	infos[0] = gpu("")
	sums, errs = run(t, nodes, plan, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("again, rank %d: %v", r, err)
		}
	}
	if s := sums[0]; s.InstalledNodes != 4 {
		t.Errorf("again: %d of 4 nodes held the set", s.InstalledNodes)
	}
	// Another node type under the same DEST (its GPU changed): not held.
	infos[0] = gpu("8.0")
	_, errs = run(t, nodes, plan, nil)
	if !errors.Is(errs[0], bundle.ErrExist) {
		t.Errorf("a tree filtered for sm_90 counted as held for sm_80: %v", errs[0])
	}
}

// The toolchain is compared by the presets' rules: a Triton difference
// is said for a Triton cache, with its effect; a driver difference alone
// is not; what the node could not read is said.
func TestRunToolchain(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "cache.kbundle")
	writeSet(t, set, map[string][]byte{"triton/x": []byte("x")}, map[string]string{bundle.MetaPreset: "triton",
		bundle.MetaTriton: "3.6.0", bundle.MetaPython: "3.11.2", bundle.MetaGPUDriver: "550.54", bundle.MetaGPUCompute: "9.0"})
	asked := [][]string{}
	for _, c := range []struct {
		name      string
		toolchain func([]string) (map[string]string, error)
		misses    []string
		notHere   []string
		err       string
	}{
		{"triton differs", func(keys []string) (map[string]string, error) {
			asked = append(asked, keys)
			return map[string]string{bundle.MetaTriton: "3.5.1", bundle.MetaPythonPath: "/venv/bin/python"}, nil
		}, []string{"warmed with triton 3.6.0, here 3.5.1: Triton will recompile every kernel (its key starts with the Triton version and a hash of Triton's sources)"}, nil, ""},
		{"triton not installed", func([]string) (map[string]string, error) { return map[string]string{}, nil }, nil, []string{"triton 3.6.0"}, ""},
		{"no python", func([]string) (map[string]string, error) {
			return nil, errors.New("cannot ask Python: python3: not found in PATH")
		}, nil, nil, "cannot ask Python: python3: not found in PATH"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sums, errs := run(t, []int{0}, func(int) load.Plan {
				return load.Plan{Bundle: set, Dest: filepath.Join(t.TempDir(), "d"), UseRecorded: true,
					HostInfo: func() map[string]string {
						return map[string]string{bundle.MetaGPUDriver: "560.35", bundle.MetaGPUCompute: "9.0"}
					}, Toolchain: c.toolchain}
			}, nil)
			if errs[0] != nil {
				t.Fatal(errs[0])
			}
			s := sums[0]
			var got []string
			for _, m := range s.Misses {
				got = append(got, m.String())
			}
			if !reflect.DeepEqual(got, c.misses) || !reflect.DeepEqual(s.NotHere, c.notHere) || s.ToolchainError != c.err {
				t.Errorf("misses %q not here %v error %q", got, s.NotHere, s.ToolchainError)
			}
			if want := len(c.misses); s.MismatchNodes != want || len(s.MismatchKeys) != want {
				t.Errorf("%d nodes differ: %v", s.MismatchNodes, s.MismatchKeys)
			}
			if unknown := c.err != "" || len(c.notHere) > 0; (s.UnknownNodes == 1) != unknown {
				t.Errorf("%d nodes could not tell", s.UnknownNodes)
			}
		})
	}
	// Only what the bundle records and the triton preset compares is asked.
	if want := [][]string{{bundle.MetaTriton}}; !reflect.DeepEqual(asked, want) {
		t.Errorf("asked %v, want %v", asked, want)
	}
}
