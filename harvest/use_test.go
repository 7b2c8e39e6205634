package harvest

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
)

// tritonTree reads testdata/triton-cache/WHICH, a Triton cache laid
// out as Triton's FileCacheManager writes it (a base32 hash directory a
// kernel: its stages, its metadata NAME.json and its group file
// __grp__NAME.json), as names under triton/.
func tritonTree(t *testing.T, which string) map[string]string {
	t.Helper()
	root := filepath.Join("testdata", "triton-cache", which)
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		out["triton/"+filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func presetUse(t *testing.T, n NodeReport, preset string) PresetUse {
	t.Helper()
	for _, u := range n.Presets {
		if u.Preset == preset {
			return u
		}
	}
	t.Fatalf("%s: no preset %s in %+v", n.Host, preset, n.Presets)
	return PresetUse{}
}

// The same Triton kernel under a new hash directory (its options moved)
// counts as compiled again, not new; a kernel the set lacks is new; a
// node that read the other loaded kernel ran warm, one that read none
// is told the likely cause: Triton's hash over the options.
func TestUseTritonNewHash(t *testing.T) {
	dir := t.TempDir()
	skipNoatime(t, dir)
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 2, tritonTree(t, "warmed"))
	time.Sleep(20 * time.Millisecond)
	read(t, dest+".node0/triton/2HWSNRQMVDNS4LUL2FAHGS2KTCOQ2EA5JFD3NW3LPIIK7VHAHQNA/__grp__softmax_kernel.json")
	read(t, dest+".node0/triton/2HWSNRQMVDNS4LUL2FAHGS2KTCOQ2EA5JFD3NW3LPIIK7VHAHQNA/softmax_kernel.cubin")
	for _, node := range []string{".node0", ".node1"} {
		for n, c := range tritonTree(t, "job") {
			write(t, dest+node, n, c)
		}
	}
	s := runPlan(t, set, dest, 2, 1, func(*Plan) {})
	u0, u1 := presetUse(t, s.Nodes[0], "triton"), presetUse(t, s.Nodes[1], "triton")
	if u0.Loaded != 2 || u0.Used != 1 || u0.New != 1 || u0.Recompiled != 1 || u0.Cause != nil {
		t.Errorf("node 0 (read softmax): %+v", u0)
	}
	if u1.Loaded != 2 || u1.Used != 0 || u1.New != 1 || u1.Recompiled != 1 || u1.Cause == nil || u1.Cause.Rule != "key" ||
		!strings.Contains(u1.Cause.Text, "Triton's key holds the kernel's options") {
		t.Errorf("node 1 (read nothing): %+v %+v", u1, u1.Cause)
	}
	if want := "cache: triton compiled again: Triton's hash over the options moved"; s.Verdict != want {
		t.Errorf("verdict %q, want %q", s.Verdict, want)
	}
	report := UseReport(s)
	want := []string{
		"kbn0 (rank 0): triton: 1 of 2 units used; 1 new, 1 recompiled",
		"kbn1 (rank 1): triton: 0 of 2 units used; 1 new, 1 recompiled: the same kernels compiled under new hashes",
	}
	if len(report) != len(want) {
		t.Fatalf("report:\n%s", strings.Join(report, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(report[i], w) {
			t.Errorf("line %d: %q, want %q…", i, report[i], w)
		}
	}
}

// Numba: a new signature of a loaded function is a new entry (a data
// file the set lacks, beside its index); a source touched since the
// warm-up makes Numba write its index afresh and its data files again
// (the same bytes, a new time): compiled again, cause "source time".
// Nodes of the same counts merge in hostlist form.
func TestUseNumba(t *testing.T) {
	dir := t.TempDir()
	skipNoatime(t, dir)
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 4, unitFiles)
	time.Sleep(20 * time.Millisecond)
	for _, node := range []string{".node0", ".node1"} { // new signatures of a
		read(t, dest+node+"/numba/a-1.py312.nbi")
		read(t, dest+node+"/numba/a-1.py312.1.nbc")
		read(t, dest+node+"/"+tri+"k.cubin")
		write(t, dest+node, "numba/a-1.py312.nbi", "aaaaaaaaaa+2")
		write(t, dest+node, "numba/a-1.py312.2.nbc", "a float")
	}
	for _, node := range []string{".node2", ".node3"} { // b's source touched
		read(t, dest+node+"/numba/b-1.py312.nbi")
		read(t, dest+node+"/"+tri+"k.cubin")
		write(t, dest+node, "numba/b-1.py312.nbi", "bbbbbbbbbb, new stamp")
		write(t, dest+node, "numba/b-1.py312.1.nbc", strings.Repeat("B", 20)) // the same bytes again
	}
	s := runPlan(t, set, dest, 4, 1, func(*Plan) {})
	for i, want := range []PresetUse{
		{Preset: "numba", Loaded: 3, Used: 1, New: 1},
		{Preset: "numba", Loaded: 3, Used: 1, New: 1},
		{Preset: "numba", Loaded: 3, Used: 1, Recompiled: 1},
		{Preset: "numba", Loaded: 3, Used: 1, Recompiled: 1},
	} {
		got := presetUse(t, s.Nodes[i], "numba")
		got.Cause, got.moved = nil, ""
		if got != want {
			t.Errorf("node %d: %+v, want %+v", i, got, want)
		}
		if tr := presetUse(t, s.Nodes[i], "triton"); tr.Loaded != 1 || tr.Used != 1 || tr.Cause != nil {
			t.Errorf("node %d: triton %+v", i, tr)
		}
	}
	report := strings.Join(UseReport(s), "\n")
	for _, w := range []string{
		"kbn[0-1]: numba: 1 of 3 units used; 1 new, 0 recompiled\n",
		"kbn[0-3]: triton: 1 of 1 unit used; 0 new, 0 recompiled\n",
		"kbn[2-3]: numba: 1 of 3 units used; 0 new, 1 recompiled\n",
	} {
		if !strings.Contains(report+"\n", w) {
			t.Errorf("report lacks %q:\n%s", w, report)
		}
	}
	if want := "cache: warm (3 of 4 units used; 1 new; 1 recompiled)"; s.Verdict != want {
		t.Errorf("verdict %q, want %q", s.Verdict, want)
	}
	// The touched source alone: b's unit is most of what was loaded.
	dir = t.TempDir()
	set, dest = filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 1, map[string]string{"numba/b-1.py312.nbi": "bbbbbbbbbb", "numba/b-1.py312.1.nbc": strings.Repeat("B", 20)})
	time.Sleep(20 * time.Millisecond)
	read(t, dest+".node0/numba/b-1.py312.nbi")
	write(t, dest+".node0", "numba/b-1.py312.nbi", "bbbbbbbbbb, new stamp")
	write(t, dest+".node0", "numba/b-1.py312.1.nbc", strings.Repeat("B", 20))
	s = runPlan(t, set, dest, 1, 1, func(*Plan) {})
	u := presetUse(t, s.Nodes[0], "numba")
	if u.Recompiled != 1 || u.Cause == nil || u.Cause.Rule != "key" || !strings.Contains(s.Verdict, "source time") {
		t.Errorf("touched: %+v %+v, verdict %q", u, u.Cause, s.Verdict)
	}
}

// A job that got none of the exports read nothing under DEST and wrote
// nothing there: the harvest names the variable to pass. With it passed
// to the harvest's step, the same silence is said without that advice.
func TestUseExportsMissing(t *testing.T) {
	dir := t.TempDir()
	skipNoatime(t, dir)
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 2, unitFiles)
	s := runPlan(t, set, dest, 2, 1, func(p *Plan) { p.Getenv = func(string) string { return "" } })
	for _, n := range s.Nodes {
		u := presetUse(t, n, "numba")
		if u.Loaded != 3 || u.Used != 0 || u.Cause == nil || u.Cause.Rule != "exports" ||
			!strings.Contains(u.Cause.Text, "pass NUMBA_CACHE_DIR (`mpirun -x NUMBA_CACHE_DIR`, or `srun --export=ALL`)") {
			t.Errorf("%s: %+v %+v", n.Host, u, u.Cause)
		}
	}
	if want := "cache: loaded but unused: pass NUMBA_CACHE_DIR (`mpirun -x NUMBA_CACHE_DIR`, or `srun --export=ALL`)"; s.Verdict != want {
		t.Errorf("verdict %q, want %q", s.Verdict, want)
	}
	s = runPlan(t, set, dest, 2, 1, func(p *Plan) {
		node := ".node" + strings.TrimPrefix(p.Host, "kbn")
		p.Getenv = func(k string) string {
			return map[string]string{"NUMBA_CACHE_DIR": dest + node + "/numba", "TRITON_CACHE_DIR": dest + node + "/triton"}[k]
		}
	})
	if u := presetUse(t, s.Nodes[0], "numba"); u.Cause == nil || u.Cause.Rule != "unread" {
		t.Errorf("variables passed: %+v %+v", u, u.Cause)
	}
	if !strings.HasPrefix(s.Verdict, "cache: loaded but unused: did the application get ") {
		t.Errorf("verdict %q", s.Verdict)
	}
}

// A warm job (everything read, nothing compiled) gets no cause.
func TestUseWarm(t *testing.T) {
	dir := t.TempDir()
	skipNoatime(t, dir)
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 1, unitFiles)
	time.Sleep(20 * time.Millisecond)
	for n := range unitFiles {
		read(t, filepath.Join(dest+".node0", n))
	}
	s := runPlan(t, set, dest, 1, 1, func(p *Plan) { p.Getenv = func(string) string { return "" } })
	for _, u := range s.Nodes[0].Presets {
		if u.Cause != nil || u.Used != u.Loaded {
			t.Errorf("%+v %+v", u, u.Cause)
		}
	}
	if s.Verdict != "cache: warm (4 of 4 units used)" {
		t.Errorf("verdict %q", s.Verdict)
	}
}

// Each rule of causeRules, with what makes it hold, and the order: the
// first that holds is said.
func TestCauseRules(t *testing.T) {
	presets := presetOf(nil) // by subdirectory: each of these is its preset's name
	warmed := map[string]string{bundle.MetaNumba: "0.56.4", bundle.MetaGPUCompute: "9.0", bundle.MetaTriton: "3.4.0"}
	same := map[string]string{bundle.MetaNumba: "0.56.4", bundle.MetaGPUCompute: "9.0", bundle.MetaTriton: "3.4.0"}
	newer := map[string]string{bundle.MetaNumba: "0.60.0", bundle.MetaGPUCompute: "9.0", bundle.MetaTriton: "3.4.0"}
	other := map[string]string{bundle.MetaNumba: "0.56.4", bundle.MetaGPUCompute: "8.0", bundle.MetaTriton: "3.4.0"}
	for _, tc := range []struct {
		name     string
		use      PresetUse
		unpassed []string
		local    map[string]string
		rule     string // "": none
		says     string
	}{
		{"exports", PresetUse{Preset: "numba", Loaded: 3}, []string{"NUMBA_CACHE_DIR"}, same, "exports", "pass NUMBA_CACHE_DIR (`mpirun -x NUMBA_CACHE_DIR`, or `srun --export=ALL`)"},
		{"read nothing, variable passed", PresetUse{Preset: "numba", Loaded: 3}, nil, same, "unread", "it ran no Numba code"},
		{"toolchain before the key", PresetUse{Preset: "numba", Loaded: 1, Used: 1, Recompiled: 2, moved: movedNumba}, nil, newer, "toolchain", "warmed with numba 0.56.4, here 0.60.0"},
		{"toolchain, nothing read", PresetUse{Preset: "numba", Loaded: 3, New: 3}, []string{"NUMBA_CACHE_DIR"}, newer, "toolchain", "Numba will recompile every function"},
		{"numba source time", PresetUse{Preset: "numba", Loaded: 1, Used: 1, Recompiled: 2, moved: movedNumba}, nil, same, "key", "Numba keys its index on the source file's time"},
		{"triton options", PresetUse{Preset: "triton", Loaded: 2, Recompiled: 2, moved: movedTriton}, nil, same, "key", "Triton's key holds the kernel's options"},
		{"jax topology", PresetUse{Preset: "jax", Loaded: 2, Recompiled: 2, moved: movedJAX}, nil, same, "key", "JAX's key holds the device topology"},
		{"vllm rank dirs", PresetUse{Preset: "vllm", Loaded: 2, New: 0, Recompiled: 2, moved: movedVLLMRank}, nil, same, "key", "vLLM keeps one cache per rank (rank_R_D)"},
		{"vllm hash", PresetUse{Preset: "vllm", Loaded: 2, Recompiled: 2, moved: movedVLLMHash}, nil, same, "key", "vLLM's compile hash"},
		{"gpu architecture", PresetUse{Preset: "triton", Loaded: 2, New: 2}, nil, other, "machine", "another GPU architecture than the warm-up's"},
		{"key before the machine", PresetUse{Preset: "triton", Loaded: 2, Recompiled: 2, moved: movedTriton}, nil, other, "key", "Triton's key"},
		{"no rule knows", PresetUse{Preset: "triton", Loaded: 2, New: 2}, nil, same, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &causeInput{use: &tc.use, preset: presets[tc.use.Preset], node: &list{Dest: "/tmp/d", Unpassed: tc.unpassed, Local: tc.local}, recorded: warmed}
			c := findCause(in)
			switch {
			case tc.rule == "" && c != nil:
				t.Errorf("cause %+v, want none", c)
			case tc.rule == "":
			case c == nil:
				t.Errorf("no cause, want %s", tc.rule)
			case c.Rule != tc.rule || !strings.Contains(c.Text, tc.says):
				t.Errorf("cause %+v, want rule %s saying %q", c, tc.rule, tc.says)
			}
		})
	}
	// Every rule has a case above.
	for _, r := range causeRules {
		if !slices.Contains([]string{"exports", "toolchain", "key", "machine", "unread"}, r.name) {
			t.Errorf("rule %s has no case", r.name)
		}
	}
}
