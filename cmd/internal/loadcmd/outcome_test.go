package loadcmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/harvest"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
)

// TestKindOf: the one classification of a load's failures, its exit
// status and each front end's hint.
func TestKindOf(t *testing.T) {
	nb := func(err error) error { return fmt.Errorf("%w: %w", broadcast.ErrNoBundle, err) }
	for _, c := range []struct {
		name    string
		err     error
		kind    Kind
		exit    int
		cli, py string // hint substrings; "-": no hint
	}{
		{"missing bundle", nb(fs.ErrNotExist), Unusable, 3, "kbundle warm --pack", "kbundle warm --pack"},
		{"damaged", nb(bundle.ErrChecksum), Unusable, 3, "damaged", "damaged"},
		{"untrusted", nb(bundle.ErrUntrusted), Unusable, 3, "kernels are code", "kernels are code"},
		{"none configured", nb(errors.New("no bundle given")), Unusable, 3, "-", "-"},
		{"unreadable bundle", nb(fs.ErrPermission), Failed, 1, "cannot read the bundle", "cannot read the bundle"},
		{"dest exists", bundle.ErrExist, Failed, 1, "use --force", "force=True"},
		{"dest changed", bundle.ErrChanged, Failed, 1, "kbundle harvest", "harvest()"},
		{"dest refused", fmt.Errorf("x: %w", bundle.ErrDestination), Failed, 1, "-", "-"},
		{"disk full", bundle.ErrNoSpace, Failed, 1, "-", "-"},
		{"dest unwritable", fs.ErrPermission, Failed, 1, "choose another DEST", "choose another dest"},
		{"dest other", errors.New("x"), Failed, 1, "DEST's path", "dest's path"},
		{"interrupted", context.Canceled, Failed, 1, "-", "-"},
		{"usage", usagef("--jobs 5000"), Usage, 2, "-", "-"},
		{"trust", fmt.Errorf("%w: KBUNDLE_TRUSTED_GROUPS", bundle.ErrTrustPolicy), Usage, 2, "KBUNDLE_TRUSTED_GROUPS and", "KBUNDLE_TRUSTED_GROUPS and"},
		{"comm", fmt.Errorf("%w: split", broadcast.ErrComm), Comm, 1, "-", "-"},
		{"adopt", AtComm(mpi.ErrThreadLevel), Comm, 1, "thread_level", "thread_level"},
		{"any MPI set-up error", AtComm(errors.New("no MPI")), Comm, 1, "-", "-"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if k := KindOf(c.err); k != c.kind || k.Exit() != c.exit {
				t.Errorf("kind %q exit %d, want %q %d", k, k.Exit(), c.kind, c.exit)
			}
			for _, h := range []struct {
				f    Front
				want string
			}{{CLI, c.cli}, {Python, c.py}} {
				got := Hint(h.f, c.err)
				if h.want == "-" && got != "" || h.want != "-" && !strings.Contains(got, h.want) {
					t.Errorf("front %d: hint %q, want %q", h.f, got, h.want)
				}
			}
		})
	}
}

// TestWarnings: one set of texts, for both front ends; names escaped.
func TestWarnings(t *testing.T) {
	w := Warnings(CLI, &load.Summary{Dest: "/t/d-1", Taken: "/t/d\x1b[2J", TakenNodes: 2, EmptyPresets: []string{"jax"},
		MismatchNodes: 3, MismatchKeys: []string{"gpu.model: warmed on \"A\", here \"B\""}})
	want := []string{
		`warning: "/t/d\x1b[2J" belongs to another user on 2 nodes (made in advance, as if to deny this load); loaded into /t/d-1 instead`,
		"warning: the bundle has nothing for preset jax: its variables point at an empty directory",
		"warning: 3 nodes differ from the machine the cache was warmed on (rank 0's node: gpu.model: warmed on \"A\", here \"B\"); compiled kernels may miss",
	}
	if len(w) != len(want) {
		t.Fatalf("%q", w)
	}
	for i := range want {
		if !strings.HasPrefix(w[i], want[i]) {
			t.Errorf("%q\nwant %q", w[i], want[i])
		}
	}
	if w := Warnings(CLI, &load.Summary{}); w != nil {
		t.Errorf("%q", w)
	}
}

// Nodes that differ alike from the warm-up machine are one warning, in
// hostlist form; each other way is its own line.
func TestWarningsMergeNodes(t *testing.T) {
	other := []string{`host.cpu_model: warmed on "a", here "b"`}
	notes := []load.NodeNote{{Host: "kbn1", Mismatch: other}, {Host: "kbn2", Mismatch: other},
		{Host: "kbn7", Mismatch: []string{`host.cpu_model: warmed on "a", here "c"`}}, {Host: "kbn3", Mismatch: other}}
	got := Warnings(CLI, &load.Summary{MismatchNodes: 4, Notes: notes})
	want := []string{
		`warning: kbn[1-3] differ from the machine the cache was warmed on (host.cpu_model: warmed on "a", here "b"); compiled kernels may miss`,
		`warning: kbn7 differs from the machine the cache was warmed on (host.cpu_model: warmed on "a", here "c"); compiled kernels may miss`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("warnings\n%q\nwant\n%q", got, want)
	}
}

// TestFrontWords (issue 27): the libraries state what is wrong, and each
// front end says what to type, by the error's kind: the CLI its flags,
// Python load_bundle's and harvest()'s keywords, and neither the other's.
func TestFrontWords(t *testing.T) {
	exist := &bundle.Error{File: "/d", Err: bundle.ErrExist}
	changed := &bundle.Error{File: "/d", Err: bundle.ErrChanged, Msg: "kbundle installed it (content digest x) and its tree changed since (1 new, 0 changed, 0 missing entries: the job compiled more)"}
	refused := func(fix harvest.Fix) error { return &harvest.Refusal{Msg: "harvest: no bundle set", Fix: fix} }
	for _, c := range []struct {
		name    string
		words   func(Front) string
		cli, py string
	}{
		{"dest exists", func(f Front) string { o := Failure(f, exist); return o.Reason + "\n" + o.Hint },
			"hint: use --force to replace it (only a tree kbundle installed; everything in it is deleted), or choose another destination",
			"hint: pass force=True to replace it (only a tree kbundle installed; everything in it is deleted), or choose another destination"},
		{"dest changed", func(f Front) string { o := Failure(f, changed); return o.Reason + "\n" + o.Hint },
			"run `kbundle harvest` first to keep those entries in the set; --force replaces it and loses them",
			"call harvest() first to keep those entries in the set; force=True replaces it and loses them"},
		{"no parent", func(f Front) string { return Hint(f, &bundle.Error{File: "/a/b", Err: bundle.ErrNoParent}) },
			"hint: create it first, or pass --parents", "hint: create it first, or pass parents=True"},
		{"harvest: no set", func(f Front) string { return HarvestFailure(f, refused(harvest.Fix{Field: harvest.FixBundle})).Reason },
			"harvest: no bundle set; pass --bundle PATH or set KBUNDLE_BUNDLE", "harvest: no bundle set; pass bundle=PATH or set KBUNDLE_BUNDLE"},
		{"harvest: another set", func(f Front) string {
			return HarvestFailure(f, refused(harvest.Fix{Field: harvest.FixBundle, Value: "/s.kbundle"})).Reason
		}, "; pass --bundle /s.kbundle", "; pass bundle=/s.kbundle"},
		{"harvest: a tie", func(f Front) string { return HarvestFailure(f, refused(harvest.Fix{Field: harvest.FixDest})).Reason },
			"; pass --to the one this job used", "; pass dest= the one this job used"},
		{"harvest: no fix", func(f Front) string { return HarvestFailure(f, refused(harvest.Fix{})).Reason },
			"harvest: no bundle set", "harvest: no bundle set"},
		{"report: no DEST", func(f Front) string {
			return strings.Join(HarvestReport(f, &harvest.Summary{Nodes: []harvest.NodeReport{{Host: "n0", MissingDir: true, DestNote: "nothing loaded here"}}}), "\n")
		}, "n0 (rank 0): no DEST: nothing loaded here; pass --to the DEST load printed", "n0 (rank 0): no DEST: nothing loaded here; pass dest= the DEST load_bundle used"},
		{"report: another set's tree", func(f Front) string {
			return strings.Join(HarvestReport(f, &harvest.Summary{Nodes: []harvest.NodeReport{{Host: "n0", MissingDir: true, DestNote: "nothing loaded here", OtherSet: "/o.kbundle"}}}), "\n")
		}, "; pass --bundle /o.kbundle to harvest the newest, or --to the DEST load printed", "; pass bundle=/o.kbundle to harvest the newest, or dest= the DEST load_bundle used"},
		{"report: over the bound", func(f Front) string {
			return strings.Join(pruneReport(f, &harvest.Summary{MaxSize: 100, SetBytes: 160, PruneNote: "not pruned"}), "\n")
		}, "warning: the set's 160 B are over --max-size 100 B: not pruned", "warning: the set's 160 B are over max_size= 100 B: not pruned"},
		{"report: within the bound", func(f Front) string {
			return strings.Join(PruneLines(f, &bundle.Prune{Limit: 100, Before: 60}, false), "\n")
		}, "the set's 60 B are within --max-size 100 B: nothing to prune", "the set's 60 B are within max_size= 100 B: nothing to prune"},
		{"report: pruned", func(f Front) string {
			p := &bundle.Prune{Limit: 90, Target: 81, Before: 160, After: 60, DroppedBytes: 100}
			for i := range 12 {
				p.Dropped = append(p.Dropped, bundle.Unit{Name: fmt.Sprintf("numba/u%d", i)})
			}
			return strings.Join(PruneLines(f, p, true), "\n")
		}, "dry run: pruning would drop 12 cache units (100 B), the least recently used, to bring the set from 160 B to 60 B (--max-size 90 B, down to 90 %: 81 B)\n",
			"dry run: pruning would drop 12 cache units (100 B), the least recently used, to bring the set from 160 B to 60 B (max_size= 90 B, down to 90 %: 81 B)\n"},
		{"report: more than named", func(f Front) string {
			p := &bundle.Prune{Limit: 90}
			for i := range 12 {
				p.Dropped = append(p.Dropped, bundle.Unit{Name: fmt.Sprintf("numba/u%d", i)})
			}
			return PruneLines(f, p, false)[11]
		}, "dropped 2 more (--json lists them all)", "dropped 2 more"},
		{"load: GPU filter", func(f Front) string {
			return strings.Join(Warnings(f, &load.Summary{Skipped: 2, GPUArch: "cuda:90", SkippedArchs: []string{"cuda:80"}}), "\n")
		}, "; --gpu-arch all installs every architecture", "; KBUNDLE_GPU_ARCH=all installs every architecture"},
		{"load: no GPU", func(f Front) string { return strings.Join(Warnings(f, &load.Summary{AllArchNodes: 1}), "\n") },
			"; --gpu-arch ARCH installs one", "; KBUNDLE_GPU_ARCH=ARCH installs one"},
		{"load: toolchain", func(f Front) string { return strings.Join(Warnings(f, &load.Summary{ToolchainError: "x"}), "\n") },
			"(--python PATH or KBUNDLE_PYTHON names the job's interpreter)", "(load_bundle asks the interpreter it runs in: call it from the job's)"},
		{"load: no set yet", func(f Front) string {
			return strings.Join(Warnings(f, &load.Summary{Missing: true, Bundle: "/s"}), "\n")
		},
			"; `kbundle harvest` at the job's end writes the set", "; harvest() at the job's end writes the set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cli, py := c.words(CLI), c.words(Python)
			if !strings.Contains(cli, c.cli) {
				t.Errorf("the CLI says\n%s\nwant\n%s", cli, c.cli)
			}
			if !strings.Contains(py, c.py) {
				t.Errorf("Python says\n%s\nwant\n%s", py, c.py)
			}
			if flag := regexp.MustCompile(`--[a-z]`); flag.MatchString(py) {
				t.Errorf("Python's words name a flag: %s", py)
			}
			if kw := regexp.MustCompile(`\b[a-z_]+=[A-Z/ ]|\b[a-z_]+=True|\(\)`); kw.MatchString(cli) {
				t.Errorf("the CLI's words name a keyword: %s", cli)
			}
		})
	}
}

// TestWarningsByRule: a difference a preset's rule names is said with
// what the framework does, rank 0's node's, after how many nodes differ;
// what could not be compared is said; what the GPU filter left out, and
// the nodes that saw no GPU.
func TestWarningsByRule(t *testing.T) {
	miss := preset.Miss{Key: bundle.MetaTriton, Compare: "exact", Warmed: "3.6.0", Here: "3.5.1", Presets: []string{"triton"},
		Effects: []string{"Triton will recompile every kernel"}}
	for _, c := range []struct {
		name string
		sum  load.Summary
		want []string
	}{
		{"one node", load.Summary{Nodes: 1, MismatchNodes: 1, Misses: []preset.Miss{miss}},
			[]string{"warning: warmed with triton 3.6.0, here 3.5.1: Triton will recompile every kernel"}},
		{"several", load.Summary{Nodes: 4, MismatchNodes: 3, Misses: []preset.Miss{miss}},
			[]string{"warning: 3 of 4 nodes differ from the machine the cache was warmed on in what their caches key on; rank 0's node:",
				"warning: warmed with triton 3.6.0, here 3.5.1: Triton will recompile every kernel"}},
		{"no python", load.Summary{Nodes: 1, ToolchainError: "cannot ask Python: python3: not found in PATH"},
			[]string{"warning: cannot tell whether Python's packages match the warm-up's: cannot ask Python: python3: not found in PATH (--python PATH or KBUNDLE_PYTHON names the job's interpreter)"}},
		{"not installed", load.Summary{Nodes: 1, NotHere: []string{"triton 3.6.0"}, PythonPath: "/usr/bin/python3"},
			[]string{"warning: cannot compare the warm-up's triton 3.6.0: not found here (Python: /usr/bin/python3); if the job runs another Python, --python PATH or KBUNDLE_PYTHON names the job's interpreter"}},
		{"filtered", load.Summary{Nodes: 3, GPUArch: "cuda:90", Skipped: 12, SkippedBytes: 3 << 20, SkippedArchs: []string{"cuda:80"}, SkippedNodes: 2, AllArchNodes: 1},
			[]string{"installed the kernels of GPU architecture cuda:90 (this node's): left out 12 entries (3.0 MiB) built for cuda:80; 2 nodes left out other architectures'; --gpu-arch all installs every architecture",
				"no GPU visible to the load on 1 node (Slurm's ConstrainDevices hides GPUs from a step without --gres): installed the kernels of every GPU architecture the set holds; --gpu-arch ARCH installs one"}},
		{"no GPU, no Slurm", load.Summary{Nodes: 1, AllArchNodes: 1},
			[]string{"no GPU visible to the load on 1 node: installed the kernels of every GPU architecture the set holds; --gpu-arch ARCH installs one"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Slurm's cause is named under Slurm only (U45).
			job := "42"
			if strings.Contains(c.name, "no Slurm") {
				job = ""
			}
			t.Setenv("SLURM_JOB_ID", job)
			if got := Warnings(CLI, &c.sum); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Warnings:\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

// TestAllocationWarning: a load that reached fewer nodes than the
// allocation holds says so, with how to start it (U38).
func TestAllocationWarning(t *testing.T) {
	for _, c := range []struct {
		a     detect.Allocation
		nodes int
		want  string
	}{
		{detect.Allocation{Scheduler: "slurm", Nodes: 4, Source: "SLURM_JOB_NUM_NODES=4"}, 1,
			"warning: this job has 4 nodes (SLURM_JOB_NUM_NODES=4) but the load ran on 1 node: the application's tasks on the other 3 will find no DEST and run cold; start the load with srun --ntasks-per-node=1 kbundle load ... (or mpirun --map-by ppr:1:node)"},
		{detect.Allocation{Scheduler: "pbs", Nodes: 3, Source: "PBS_NODEFILE (3 hosts)"}, 2,
			"warning: this job has 3 nodes (PBS_NODEFILE (3 hosts)) but the load ran on 2 nodes: the application's tasks on the other 1 will find no DEST and run cold; start the load with mpiexec --ppn 1 kbundle load ... (Cray PALS; Open MPI: mpirun --map-by ppr:1:node)"},
		{detect.Allocation{Scheduler: "slurm", Nodes: 4, Source: "SLURM_NNODES=4"}, 4, ""},
		{detect.Allocation{Scheduler: "slurm"}, 1, ""},
		{detect.Allocation{}, 1, ""},
	} {
		if got := AllocationWarning(c.a, c.nodes); got != c.want {
			t.Errorf("AllocationWarning(%+v, %d) =\n%q\nwant\n%q", c.a, c.nodes, got, c.want)
		}
	}
}
