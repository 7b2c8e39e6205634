package preset

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
)

// aiTree is one framework's cache tree, relative to DIR, laid out as the
// framework's source writes it (the file cited beside each).
type aiTree struct {
	preset string
	files  []string
	// groups are Triton group files (relative): their children are the
	// other files of the group's directory, by absolute path.
	groups []string
	// handles are vLLM's vllm_compile_cache.py files (relative): a
	// Python literal naming the artifact beside it by absolute path.
	handles []string
	// ninja are build directories (relative) holding a FlashInfer-style
	// build.ninja that names its outputs by absolute path.
	ninja []string
}

var aiTrees = []aiTree{
	{preset: "vllm", files: []string{
		// vllm/compilation/backends.py, VllmBackend.__call__:
		// torch_compile_cache/HASH/rank_R_D/PREFIX; compiler_interface.py,
		// InductorAdaptor.initialize_cache: inductor_cache/, triton_cache/
		// beside PREFIX. Tensor-parallel 2: two ranks.
		"vllm/torch_compile_cache/1517964802/rank_0_0/backbone/computation_graph.py",
		"vllm/torch_compile_cache/1517964802/rank_0_0/backbone/artifact_compile_range_1_8192_subgraph_0",
		"vllm/torch_compile_cache/1517964802/rank_0_0/inductor_cache/fxgraph/ab/fabc123/entry",
		"vllm/torch_compile_cache/1517964802/rank_0_0/triton_cache/KEYA/triton_poi_0.cubin",
		"vllm/torch_compile_cache/1517964802/rank_0_0/triton_cache/KEYA/triton_poi_0.json",
		"vllm/torch_compile_cache/1517964802/rank_1_0/backbone/artifact_compile_range_1_8192_subgraph_0",
		"vllm/torch_compile_cache/1517964802/rank_1_0/triton_cache/KEYB/triton_poi_0.cubin",
		// decorators.py: torch_aot_compile/HASH/rank_R_D/model.
		"vllm/torch_aot_compile/9f2c/rank_0_0/model",
		"vllm/torch_aot_compile/9f2c/rank_1_0/model",
		// vllm/utils/deep_gemm.py: DG_JIT_CACHE_DIR = VLLM_CACHE_ROOT/deep_gemm.
		"vllm/deep_gemm/cache/kernel.sm90_fp8_gemm_1d2d.0123456789abcdef0123456789abcdef/kernel.cu",
		"vllm/deep_gemm/cache/kernel.sm90_fp8_gemm_1d2d.0123456789abcdef0123456789abcdef/kernel.cubin",
	}, handles: []string{
		// backends.py, CompilerManager.save_to_file: the handles, (key,
		// absolute path) for compiler_interface.py's
		// InductorStandaloneAdaptor.compile.
		"vllm/torch_compile_cache/1517964802/rank_0_0/backbone/vllm_compile_cache.py",
		"vllm/torch_compile_cache/1517964802/rank_1_0/backbone/vllm_compile_cache.py",
	}, groups: []string{
		"vllm/torch_compile_cache/1517964802/rank_0_0/triton_cache/KEYA/__grp__triton_poi_0.json",
		"vllm/torch_compile_cache/1517964802/rank_1_0/triton_cache/KEYB/__grp__triton_poi_0.json",
	}},
	{preset: "sglang", files: []string{
		// python/sglang/srt/environ.py, third_party_cache_defaults.
		"sglang/triton/KEYC/_fwd_kernel.cubin",
		"sglang/inductor/fxgraph/cd/fcd456/entry",
		"sglang/nv/ComputeCache/index",
		"sglang/tilelang/0.1.7/linux-x86_64/kernels/5e3a/kernel_lib.so",
		// sglang's torch_compile_cache/HASH/rank_0_0/MODEL.
		"sglang/torch_compile_cache/ab12cd34/rank_0_0/Qwen3/vllm_compile_cache.py",
		// FLASHINFER_WORKSPACE_BASE = SGLANG_CACHE_DIR: flashinfer/jit/env.py.
		"sglang/.cache/flashinfer/0.6.1/90/generated/batch_decode/batch_decode.cu",
	}, groups: []string{"sglang/triton/KEYC/__grp___fwd_kernel.json"},
		ninja: []string{"sglang/.cache/flashinfer/0.6.1/90/cached_ops/batch_decode"}},
	{preset: "flashinfer", files: []string{
		"flashinfer/.cache/flashinfer/0.6.1/80_90/generated/rope/rope.cu",
	}, ninja: []string{"flashinfer/.cache/flashinfer/0.6.1/80_90/cached_ops/rope"}},
	{preset: "deepgemm", files: []string{
		// csrc/jit/compiler.hpp, Compiler::build: cache/kernel.NAME.HASH.
		"deep_gemm/cache/kernel.sm90_bf16_gemm.fedcba9876543210fedcba9876543210/kernel.cu",
		"deep_gemm/cache/kernel.sm90_bf16_gemm.fedcba9876543210fedcba9876543210/kernel.cubin",
	}},
	{preset: "tilelang", files: []string{
		// tilelang/cache/kernel_cache.py: VERSION/PLATFORM-MACHINE/kernels/KEY.
		"tilelang/0.1.7/linux-x86_64/kernels/9b8a7c/device_kernel.cu",
		"tilelang/0.1.7/linux-x86_64/kernels/9b8a7c/host_kernel.cu",
		"tilelang/0.1.7/linux-x86_64/kernels/9b8a7c/kernel_lib.so",
		"tilelang/0.1.7/linux-x86_64/kernels/9b8a7c/params.pkl",
	}},
	{preset: "miopen", files: []string{
		// src/binary_cache.cpp, GetDb: ARCH_CUs.ukdb; src/find_db.cpp:
		// ARCHCUs.HIP.X_Y_Z.ufdb.txt; execution_context.hpp: .udb.txt.
		"miopen/cache/gfx90a68.ukdb",
		"miopen/db/gfx90a68.HIP.3_2_0.ufdb.txt",
		"miopen/db/gfx90a68.HIP.3_2_0.udb.txt",
	}},
}

// TestAIStackTrees: each framework's tree, packed and extracted to
// another path as load does, then relocated by its preset: every file
// keeps its mtime to the nanosecond, Triton's groups (vLLM's and
// SGLang's), vLLM's artifact handles and FlashInfer's build.ninja name the
// new path, and every
// other file is byte for byte what was packed. vLLM's per-rank
// directories all arrive.
func TestAIStackTrees(t *testing.T) {
	for _, tr := range aiTrees {
		t.Run(tr.preset, func(t *testing.T) {
			p, err := Lookup(tr.preset)
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			warm := filepath.Join(root, "warm")
			stamp := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
			for i, f := range tr.files {
				path := filepath.Join(warm, filepath.FromSlash(f))
				os.MkdirAll(filepath.Dir(path), 0o755)
				writeText(t, path, "content of "+f)
				os.Chtimes(path, stamp, stamp.Add(time.Duration(i)*time.Microsecond))
			}
			for _, g := range tr.groups {
				path := filepath.Join(warm, filepath.FromSlash(g))
				children := map[string]string{}
				ents, _ := os.ReadDir(filepath.Dir(path))
				for _, e := range ents {
					children[e.Name()] = filepath.Join(filepath.Dir(path), e.Name())
				}
				b, _ := json.Marshal(map[string]any{"child_paths": children})
				writeText(t, path, string(b))
				os.Chtimes(path, stamp, stamp)
			}
			for _, h := range tr.handles {
				path := filepath.Join(warm, filepath.FromSlash(h))
				art := filepath.Join(filepath.Dir(path), "artifact_compile_range_1_8192_subgraph_0")
				writeText(t, path, "{(Range(start=1, end=8192), 0, 'inductor_standalone'): ('artifact_compile_range_1_8192_subgraph_0',\n  '"+art+"')}\n")
				os.Chtimes(path, stamp, stamp)
			}
			for _, d := range tr.ninja {
				dir := filepath.Join(warm, filepath.FromSlash(d))
				os.MkdirAll(dir, 0o755)
				obj := filepath.Join(dir, "m.cuda.o")
				writeText(t, filepath.Join(dir, "build.ninja"), "cuda_home = /usr/local/cuda\nrule link\n  command = $cxx $in -o $out\nbuild "+
					filepath.Join(dir, "m.so")+": link "+obj+"\n")
				writeText(t, obj, "object")
				writeText(t, filepath.Join(dir, "m.so"), "module")
				for _, f := range []string{"build.ninja", "m.cuda.o", "m.so"} {
					os.Chtimes(filepath.Join(dir, f), stamp, stamp.Add(time.Duration(len(f))*time.Millisecond))
				}
			}
			before := mtimes(t, warm)
			file := filepath.Join(root, "b.kbundle")
			if _, err := bundle.Pack(context.Background(), warm, file, &bundle.PackOptions{Preset: tr.preset}); err != nil {
				t.Fatal(err)
			}
			rc, err := bundle.Open(file, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			dest := filepath.Join(root, "job", "dest")
			if _, err := rc.Extract(context.Background(), dest, &bundle.ExtractOptions{Parents: true}); err != nil {
				t.Fatal(err)
			}
			if err := p.Relocate(dest, warm); err != nil {
				t.Fatal(err)
			}
			got := mtimes(t, dest)
			delete(got, ".kbundle-installed") // the extraction's own record
			for _, g := range tr.groups {
				// Triton reads no mtime; its groups are rewritten anew.
				delete(got, filepath.FromSlash(g))
				delete(before, filepath.FromSlash(g))
			}
			if !equalMaps(got, before) {
				t.Errorf("mtimes differ after load and relocation:\nwarm %v\nhere %v", before, got)
			}
			rewritten := map[string]bool{}
			for _, g := range tr.groups {
				rewritten[g] = true
				b, _ := os.ReadFile(filepath.Join(dest, filepath.FromSlash(g)))
				var doc struct {
					ChildPaths map[string]string `json:"child_paths"`
				}
				if err := json.Unmarshal(b, &doc); err != nil || len(doc.ChildPaths) == 0 {
					t.Fatalf("group %s: %s (%v)", g, b, err)
				}
				for name, c := range doc.ChildPaths {
					if want := filepath.Join(dest, filepath.FromSlash(g), "..", name); c != filepath.Clean(want) {
						t.Errorf("%s: %s -> %s, want %s", g, name, c, filepath.Clean(want))
					}
				}
			}
			for _, h := range tr.handles {
				rewritten[h] = true
				b, _ := os.ReadFile(filepath.Join(dest, filepath.FromSlash(h)))
				want := filepath.Join(dest, filepath.FromSlash(h), "..", "artifact_compile_range_1_8192_subgraph_0")
				if bytes.Contains(b, []byte(warm)) || !bytes.Contains(b, []byte("'"+filepath.Clean(want)+"'")) {
					t.Errorf("%s not relocated:\n%s", h, b)
				}
			}
			for _, d := range tr.ninja {
				f := d + "/build.ninja"
				rewritten[f] = true
				b, _ := os.ReadFile(filepath.Join(dest, filepath.FromSlash(f)))
				if bytes.Contains(b, []byte(warm)) || !bytes.Contains(b, []byte(filepath.Join(dest, filepath.FromSlash(d), "m.so"))) {
					t.Errorf("%s not relocated:\n%s", f, b)
				}
			}
			filepath.Walk(warm, func(path string, fi os.FileInfo, err error) error {
				if err != nil || fi.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(warm, path)
				if rel == "b.kbundle" || rewritten[filepath.ToSlash(rel)] {
					return nil
				}
				a, _ := os.ReadFile(path)
				b, _ := os.ReadFile(filepath.Join(dest, rel))
				if !bytes.Equal(a, b) {
					t.Errorf("%s changed: %q", rel, b)
				}
				return nil
			})
			if tr.preset == "vllm" {
				for _, r := range []string{"rank_0_0", "rank_1_0"} {
					for _, top := range []string{"torch_compile_cache/1517964802", "torch_aot_compile/9f2c"} {
						if _, err := os.Stat(filepath.Join(dest, "vllm", filepath.FromSlash(top), r)); err != nil {
							t.Errorf("rank directory: %v", err)
						}
					}
				}
			}
			if !strings.HasPrefix(p.Env(dest)[0], p.Vars[0].Name+"="+dest) {
				t.Errorf("env %q", p.Env(dest))
			}
		})
	}
}
