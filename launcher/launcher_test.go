package launcher

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  error
	}{
		{"0", 0, nil},
		{"7", 7, nil},
		{"007", 7, nil},
		{"-5", -5, nil},
		{"2147483647", math.MaxInt32, nil},
		{"4294967291", 4294967291, nil},
		{"4294967296", 0, ErrRange},
		{"99999999999999999999999", 0, ErrRange},
		{"", 0, ErrSyntax},
		{"-", 0, ErrSyntax},
		{"+1", 0, ErrSyntax},
		{" 1", 0, ErrSyntax},
		{"1 ", 0, ErrSyntax},
		{"1_000", 0, ErrSyntax},
		{"0x10", 0, ErrSyntax},
		{"1e3", 0, ErrSyntax},
		{"--1", 0, ErrSyntax},
		{"١", 0, ErrSyntax}, // Arabic-Indic digit one
	}
	for _, tt := range tests {
		got, err := ParseInt(tt.in)
		if !errors.Is(err, tt.err) || (err == nil && got != tt.want) {
			t.Errorf("ParseInt(%q) = %d, %v; want %d, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestParseCount(t *testing.T) {
	tests := []struct {
		in   string
		want int
		err  error
	}{
		{"0", 0, nil},
		{"4", 4, nil},
		{"2147483647", math.MaxInt32, nil},
		{"2147483648", 0, ErrRange},
		{"-1", 0, ErrRange},
		{"four", 0, ErrSyntax},
	}
	for _, tt := range tests {
		got, err := ParseCount(tt.in)
		if !errors.Is(err, tt.err) || (err == nil && got != tt.want) {
			t.Errorf("ParseCount(%q) = %d, %v; want %d, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestSlurmStepIsTaskStep(t *testing.T) {
	for id, want := range map[int64]bool{
		0: true, 1: true, SlurmMaxNormalStepID - 1: true,
		-5: false, -4: false, -1: false,
		SlurmMaxNormalStepID: false, SlurmBatchScript: false, math.MaxUint32: false,
	} {
		if got := SlurmStepIsTaskStep(id); got != want {
			t.Errorf("SlurmStepIsTaskStep(%d) = %v, want %v", id, got, want)
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	tests := []struct {
		in          string
		nodes, tot  int
		perNode     []int // tasks on node 0, 1, …
		outsideNode int
	}{
		{"2", 1, 2, []int{2}, 1},
		{"2(x3),1", 4, 7, []int{2, 2, 2, 1}, 4},
		{"1,2(x2),3", 4, 8, []int{1, 2, 2, 3}, 4},
		{"4(x1)", 1, 4, []int{4}, 1},
		{"0,1", 2, 1, []int{0, 1}, 2},
		{"1(x2147483647)", math.MaxInt32, math.MaxInt32, []int{1, 1}, math.MaxInt32},
	}
	for _, tt := range tests {
		got, err := ParseTasksPerNode(tt.in)
		if err != nil {
			t.Errorf("ParseTasksPerNode(%q): %v", tt.in, err)
			continue
		}
		if got.Nodes() != tt.nodes || got.Total() != tt.tot {
			t.Errorf("%q: nodes %d total %d, want %d %d", tt.in, got.Nodes(), got.Total(), tt.nodes, tt.tot)
		}
		for node, want := range tt.perNode {
			if n, ok := got.OnNode(node); !ok || n != want {
				t.Errorf("%q: OnNode(%d) = %d, %v; want %d", tt.in, node, n, ok, want)
			}
		}
		if _, ok := got.OnNode(tt.outsideNode); ok {
			t.Errorf("%q: OnNode(%d) should be outside", tt.in, tt.outsideNode)
		}
		if _, ok := got.OnNode(-1); ok {
			t.Errorf("%q: OnNode(-1) should be outside", tt.in)
		}
	}
	for _, bad := range []string{
		"", ",", "2,", ",2", "2(x)", "2(x0)", "2(3)", "2(x3", "2x3", "(x3)", "2(x3)(x2)",
		"-1", "2(x-1)", " 2", "2(x 3)", "a", "2(x3),b", "2147483648",
		"2(x2147483647),1", "2147483647,1", "1(x2147483647),1",
	} {
		if _, err := ParseTasksPerNode(bad); err == nil {
			t.Errorf("ParseTasksPerNode(%q) succeeded, want an error", bad)
		} else if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
			t.Errorf("ParseTasksPerNode(%q): %v is neither ErrSyntax nor ErrRange", bad, err)
		}
	}
}

func TestTasksPerNodeString(t *testing.T) {
	for _, s := range []string{"2", "2(x3),1", "1,2(x2),3"} {
		got, err := ParseTasksPerNode(s)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != s {
			t.Errorf("String() = %q, want %q", got.String(), s)
		}
	}
}

func FuzzTasksPerNode(f *testing.F) {
	for _, s := range []string{"2", "2(x3),1", "1,2(x2),3", "0", "2(x0)", "(x", "1(x2147483647)", "9(x9),9(x9)", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tpn, err := ParseTasksPerNode(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
				t.Fatalf("%q: unexpected error kind: %v", s, err)
			}
			return
		}
		if tpn.Nodes() < 1 || tpn.Nodes() > MaxID || tpn.Total() < 0 || tpn.Total() > MaxID {
			t.Fatalf("%q: nodes %d total %d out of range", s, tpn.Nodes(), tpn.Total())
		}
		// Formatting and parsing again gives the same list.
		again, err := ParseTasksPerNode(tpn.String())
		if err != nil || !slices.Equal(again, tpn) {
			t.Fatalf("%q: String() = %q reparses to %v, %v", s, tpn.String(), again, err)
		}
		// The first and last nodes are inside, the one after is not.
		if _, ok := tpn.OnNode(0); !ok {
			t.Fatalf("%q: node 0 outside", s)
		}
		if _, ok := tpn.OnNode(tpn.Nodes() - 1); !ok {
			t.Fatalf("%q: last node outside", s)
		}
		if _, ok := tpn.OnNode(tpn.Nodes()); ok {
			t.Fatalf("%q: node %d inside", s, tpn.Nodes())
		}
	})
}

func TestTableWellFormed(t *testing.T) {
	seen := map[Family]bool{}
	for _, l := range Table {
		if seen[l.Family] {
			t.Errorf("family %s listed twice", l.Family)
		}
		seen[l.Family] = true
		if l.Name == "" || l.Source == "" {
			t.Errorf("%s: entry needs a Name and a Source", l.Family)
		}
		if len(l.Markers) == 0 || len(l.Rank) == 0 {
			t.Errorf("%s: entry needs Markers and Rank variables", l.Family)
		}
		for _, v := range l.Vars() {
			if !IsLauncherVar(v) {
				t.Errorf("%s reads %s but IsLauncherVar(%s) is false", l.Family, v, v)
			}
		}
	}
	if seen[None] {
		t.Error("None must not have a table entry")
	}
}

func TestIsLauncherVar(t *testing.T) {
	launcherVars := []string{
		"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
		"OMPI_COMM_WORLD_NODE_RANK", "OMPI_UNIVERSE_SIZE", "OMPI_MCA_ess", "OMPI_MCA_ess_base_vpid",
		"OMPI_MCA_orte_hnp_uri", "OMPI_MCA_pmix", "PRTE_LAUNCHED",
		"PMIX_RANK", "PMIX_NAMESPACE", "PMIX_SERVER_URI41",
		"PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_ID", "PMI_PORT", "PMI_JOBID", "PMI_LOCAL_RANK",
		"MPI_LOCALRANKID", "MPI_LOCALNRANKS", "HYDI_CONTROL_FD", "I_MPI_HYDRA_UUID", "I_MPI_MPIRUN",
		"MV2_COMM_WORLD_RANK", "MV2_NODE_ID", "MV2_NUM_NODES_IN_JOB", "MPIRUN_RANK", "MPISPAWN_ID",
		"PALS_RANKID", "PALS_APID", "PALS_NODEID", "PALS_LOCAL_RANKID", "PALS_SPOOL_DIR",
		"ALPS_APP_PE", "ALPS_APP_ID", "ALPS_APP_DEPTH",
		"FLUX_TASK_RANK", "FLUX_TASK_LOCAL_ID", "FLUX_JOB_SIZE", "FLUX_JOB_NNODES",
		"SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE",
		"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS", "SLURM_NTASKS",
		"SLURM_NPROCS", "SLURM_TASK_PID", "SLURM_MPI_TYPE", "SLURM_LAUNCH_NODE_IPADDR",
		"SLURM_SRUN_COMM_PORT", "SLURM_PMIX_MAPPING_SERV",
	}
	for _, v := range launcherVars {
		if !IsLauncherVar(v) {
			t.Errorf("IsLauncherVar(%q) = false, want true", v)
		}
	}
	configVars := []string{
		"PATH", "HOME", "LD_LIBRARY_PATH", "TMPDIR", "KBUNDLE_MODE", "CUDA_VISIBLE_DEVICES",
		"OMPI_MCA_btl", "OMPI_MCA_btl_vader_single_copy_mechanism", "OMPI_ALLOW_RUN_AS_ROOT",
		"OMPI_MCA_rmaps_base_oversubscribe", "HYDRA_LAUNCHER", "I_MPI_ROOT", "I_MPI_PMI_LIBRARY",
		"MV2_ENABLE_AFFINITY", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF", "SLURM_JOB_NODELIST",
		"SLURM_SUBMIT_DIR", "FLUX_URI", "FLUX_JOB_TMPDIR", "PBS_JOBID", "PMIXX", "PMI",
		"", "=", "OMPI_COMM_WORLD", // prefix without its underscore
	}
	for _, v := range configVars {
		if IsLauncherVar(v) {
			t.Errorf("IsLauncherVar(%q) = true, want false", v)
		}
	}
}

func TestScrub(t *testing.T) {
	env := []string{
		"PATH=/usr/bin", "OMPI_COMM_WORLD_RANK=1", "HOME=/root", "PMI_RANK=1",
		"SLURM_JOB_ID=7", "SLURM_PROCID=0", "KBUNDLE_MODE=write", "PMIX_RANK=1",
		"NOEQUALS", "OMPI_MCA_btl=self,vader", "EMPTY=",
	}
	orig := slices.Clone(env)
	got := Scrub(env)
	want := []string{"PATH=/usr/bin", "HOME=/root", "SLURM_JOB_ID=7", "KBUNDLE_MODE=write",
		"NOEQUALS", "OMPI_MCA_btl=self,vader", "EMPTY="}
	if !slices.Equal(got, want) {
		t.Errorf("Scrub = %q\nwant %q", got, want)
	}
	if !slices.Equal(env, orig) {
		t.Error("Scrub modified its input")
	}
	if got := Scrub(nil); len(got) != 0 {
		t.Errorf("Scrub(nil) = %q", got)
	}
}

func TestNamesAndPatterns(t *testing.T) {
	names := Names()
	if !slices.IsSorted(names) || len(names) == 0 {
		t.Fatalf("Names() not sorted or empty: %q", names)
	}
	for _, n := range names {
		if strings.Contains(n, "*") {
			t.Errorf("Names() contains a pattern %q", n)
		}
	}
	pats := ScrubPatterns()
	if !slices.IsSorted(pats) {
		t.Errorf("ScrubPatterns() not sorted")
	}
	for _, n := range names {
		if !slices.Contains(pats, n) {
			t.Errorf("ScrubPatterns() lacks %s", n)
		}
	}
}

// TestDocsListEveryVariable keeps docs/launchers.md in step with Table.
func TestDocsListEveryVariable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "launchers.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, n := range Names() {
		if !strings.Contains(doc, "`"+n+"`") {
			t.Errorf("docs/launchers.md does not mention `%s`", n)
		}
	}
	for _, l := range Table {
		if !strings.Contains(doc, "`"+string(l.Family)+"`") {
			t.Errorf("docs/launchers.md does not mention family `%s`", l.Family)
		}
	}
}
