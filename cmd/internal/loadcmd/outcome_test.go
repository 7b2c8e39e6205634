package loadcmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/preset"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
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
		{"dest exists", bundle.ErrExist, Failed, 1, "another destination", "force=True"},
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
	w := Warnings(&load.Summary{Dest: "/t/d-1", Taken: "/t/d\x1b[2J", TakenNodes: 2, EmptyPresets: []string{"jax"},
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
	if w := Warnings(&load.Summary{}); w != nil {
		t.Errorf("%q", w)
	}
}

// Nodes that differ alike from the warm-up machine are one warning, in
// hostlist form; each other way is its own line.
func TestWarningsMergeNodes(t *testing.T) {
	other := []string{`host.cpu_model: warmed on "a", here "b"`}
	notes := []load.NodeNote{{Host: "kbn1", Mismatch: other}, {Host: "kbn2", Mismatch: other},
		{Host: "kbn7", Mismatch: []string{`host.cpu_model: warmed on "a", here "c"`}}, {Host: "kbn3", Mismatch: other}}
	got := Warnings(&load.Summary{MismatchNodes: 4, Notes: notes})
	want := []string{
		`warning: kbn[1-3] differ from the machine the cache was warmed on (host.cpu_model: warmed on "a", here "b"); compiled kernels may miss`,
		`warning: kbn7 differs from the machine the cache was warmed on (host.cpu_model: warmed on "a", here "c"); compiled kernels may miss`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("warnings\n%q\nwant\n%q", got, want)
	}
}

// Python's reasons are in Python's terms: the flags the packages'
// messages name become load_bundle's keywords (U29).
func TestFailurePythonTerms(t *testing.T) {
	err := &bundle.Error{File: "/d", Err: bundle.ErrExist, Msg: "use --force to replace it"}
	py, cli := Failure(Python, err), Failure(CLI, err)
	if strings.Contains(py.Reason, "--force") || !strings.Contains(py.Reason, "pass force=True to replace it") {
		t.Errorf("Python's reason %q", py.Reason)
	}
	if !strings.Contains(cli.Reason, "use --force to replace it") {
		t.Errorf("the CLI's reason %q", cli.Reason)
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
			if got := Warnings(&c.sum); !reflect.DeepEqual(got, c.want) {
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
