package detect

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/launcher"
)

// readEnv reads a fixture (testutil.ReadEnvFixture) or fails t.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	env, err := testutil.ReadEnvFixture(path)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func mapLookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// readTSV reads an expected.tsv into rows keyed by column name.
func readTSV(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		header []string
		rows   []map[string]string
	)
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), "\t")
		if header == nil {
			header = fields
			continue
		}
		if len(fields) != len(header) {
			t.Fatalf("%s: row %q has %d fields, want %d", path, s.Text(), len(fields), len(header))
		}
		row := map[string]string{}
		for i, h := range header {
			row[h] = fields[i]
		}
		rows = append(rows, row)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// checkFixtures runs Detect on every .env file under dir and compares it
// with dir/expected.tsv; every file must have a row and every row a file.
func checkFixtures(t *testing.T, dir string) {
	rows := readTSV(t, filepath.Join(dir, "expected.tsv"))
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.env"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, row := range rows {
		name := row["case"] + "/" + row["file"]
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			env := readEnv(t, filepath.Join(dir, row["case"], row["file"]))
			r, err := Detect(mapLookup(env))
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			got := map[string]string{
				"launcher":   string(r.Launcher),
				"mpi":        strconv.FormatBool(r.MPI),
				"rank":       strconv.Itoa(r.Rank),
				"size":       strconv.Itoa(r.Size),
				"local_rank": strconv.Itoa(r.LocalRank),
				"local_size": strconv.Itoa(r.LocalSize),
				"node":       strconv.Itoa(r.Node),
				"mode":       string(DefaultMode(r)),
			}
			for col, want := range row {
				if col == "case" || col == "file" {
					continue
				}
				g, ok := got[col]
				if !ok {
					t.Fatalf("expected.tsv has unknown column %q", col)
				}
				if g != want {
					t.Errorf("%s = %s, want %s (reason: %s)", col, g, want, r.Reason)
				}
			}
			if r.Reason == "" || strings.Contains(r.Reason, "\n") {
				t.Errorf("reason %q is not one line", r.Reason)
			}
			t.Logf("%s", r.Reason)
		})
	}
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		if !seen[filepath.ToSlash(rel)] {
			t.Errorf("%s has no row in expected.tsv", rel)
		}
	}
}

// TestDetectCaptured checks the environments captured on real launchers
// (a copy of shared/fixtures/launchers).
func TestDetectCaptured(t *testing.T) { checkFixtures(t, filepath.Join("testdata", "launchers")) }

// TestDetectSynthesised checks our own fixtures for launchers and
// nestings not available here; each file cites its sources.
func TestDetectSynthesised(t *testing.T) {
	checkFixtures(t, filepath.Join("testdata", "cases"))
	files, _ := filepath.Glob(filepath.Join("testdata", "cases", "*", "*.env"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if !strings.Contains(string(b), "Source") && !strings.Contains(string(b), "source") {
			t.Errorf("%s does not cite a source", f)
		}
	}
}

// TestDetectSharedFixtures runs the same check on ../shared when it is
// present beside the repository, so a fixture added there but not copied
// into testdata is noticed.
func TestDetectSharedFixtures(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "fixtures", "launchers")
	if _, err := os.Stat(filepath.Join(dir, "expected.tsv")); err != nil {
		t.Skipf("no shared fixtures beside the repository: %v", err)
	}
	checkFixtures(t, dir)
}

// TestDetectTorchrunCaptured checks what expected.tsv has no columns for
// in the environments captured under the real torchrun: local rank, local
// size and node (GROUP_RANK; two agents on one machine are two nodes).
func TestDetectTorchrunCaptured(t *testing.T) {
	tests := []struct {
		file                  string
		rank, size, lr, ls, n int
	}{
		{"torchrun-np1/rank0.env", 0, 1, 0, 1, 0},
		{"torchrun-np4/rank2.env", 2, 4, 2, 4, 0},
		{"torchrun-np4/rank3.env", 3, 4, 3, 4, 0},
		{"torchrun-c10d-2x2/rank0.env", 0, 4, 0, 2, 0},
		{"torchrun-c10d-2x2/rank1.env", 1, 4, 1, 2, 0},
		{"torchrun-c10d-2x2/rank2.env", 2, 4, 0, 2, 1},
		{"torchrun-c10d-2x2/rank3.env", 3, 4, 1, 2, 1},
	}
	for _, tt := range tests {
		r, err := Detect(mapLookup(readEnv(t, filepath.Join("testdata", "launchers", tt.file))))
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		got := []int{r.Rank, r.Size, r.LocalRank, r.LocalSize, r.Node}
		want := []int{tt.rank, tt.size, tt.lr, tt.ls, tt.n}
		if r.Launcher != launcher.TorchElastic || !slices.Equal(got, want) {
			t.Errorf("%s: %s rank, size, local rank, local size, node = %v, want torchelastic %v (%s)",
				tt.file, r.Launcher, got, want, r.Reason)
		}
	}
}

func TestDetectRules(t *testing.T) {
	ompi := func(rank, size string, extra ...string) []string {
		return append([]string{"OMPI_COMM_WORLD_RANK=" + rank, "OMPI_COMM_WORLD_SIZE=" + size}, extra...)
	}
	step := []string{"SLURM_JOB_ID=9", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=4", "SLURM_PROCID=3",
		"SLURM_LOCALID=1", "SLURM_NODEID=1", "SLURM_STEP_TASKS_PER_NODE=2(x2)"}
	tests := []struct {
		name     string
		env      []string
		launcher launcher.Family
		mpi      bool
		rank     int
		size     int
		mode     Mode
		err      error  // wanted sentinel
		errVar   string // the error must name this variable
	}{
		{name: "empty", env: nil, launcher: launcher.None, size: 1, mode: ModeWrite},
		{name: "one task is not MPI", env: ompi("0", "1"), launcher: launcher.OpenMPI, size: 1, mode: ModeWrite},
		{name: "open mpi", env: ompi("2", "4"), launcher: launcher.OpenMPI, mpi: true, rank: 2, size: 4, mode: ModeBundle},
		{name: "slurm step", env: step, launcher: launcher.Slurm, mpi: true, rank: 3, size: 4, mode: ModeBundle},
		{name: "job id alone", env: []string{"SLURM_JOB_ID=9", "SLURM_PROCID=0", "SLURM_NTASKS=8"}, launcher: launcher.None, size: 1, mode: ModeWrite},
		{name: "step id -5", env: []string{"SLURM_JOB_ID=9", "SLURM_STEP_ID=-5", "SLURM_STEP_NUM_TASKS=4", "SLURM_PROCID=0"}, launcher: launcher.None, size: 1, mode: ModeWrite},
		{name: "extern step -4", env: []string{"SLURM_STEP_ID=-4", "SLURM_STEP_NUM_TASKS=4", "SLURM_PROCID=0"}, launcher: launcher.None, size: 1, mode: ModeWrite},
		{name: "step without num tasks", env: []string{"SLURM_STEP_ID=0", "SLURM_PROCID=0"}, launcher: launcher.None, size: 1, mode: ModeWrite},
		{name: "open mpi beats slurm step", env: append(ompi("1", "2"), step...), launcher: launcher.OpenMPI, mpi: true, rank: 1, size: 2, mode: ModeBundle},
		{name: "srun pmix open mpi", env: append([]string{"PMIX_RANK=3", "PMIX_NAMESPACE=slurm.pmix.9.0"}, step...), launcher: launcher.Slurm, mpi: true, rank: 3, size: 4, mode: ModeBundle},
		{name: "cray_shasta", env: append([]string{"PALS_RANKID=3", "PALS_APID=9.0", "PALS_NODEID=1"}, step...), launcher: launcher.Slurm, mpi: true, rank: 3, size: 4, mode: ModeBundle},
		{name: "mode override read", env: ompi("1", "4", "KBUNDLE_MODE=read"), launcher: launcher.OpenMPI, mpi: true, rank: 1, size: 4, mode: ModeRead},
		{name: "mode override write under MPI", env: ompi("1", "4", "KBUNDLE_MODE=write"), launcher: launcher.OpenMPI, mpi: true, rank: 1, size: 4, mode: ModeWrite},
		{name: "mode override off", env: []string{"KBUNDLE_MODE=off"}, launcher: launcher.None, size: 1, mode: ModeOff},
		{name: "empty mode is unset", env: []string{"KBUNDLE_MODE="}, launcher: launcher.None, size: 1, mode: ModeWrite},

		{name: "invalid mode", env: []string{"KBUNDLE_MODE=fast"}, err: ErrInvalidMode, errVar: "KBUNDLE_MODE"},
		{name: "mode is case sensitive", env: []string{"KBUNDLE_MODE=Write"}, err: ErrInvalidMode, errVar: "KBUNDLE_MODE"},
		{name: "inconsistent beats invalid mode", env: ompi("4", "4", "KBUNDLE_MODE=x"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_RANK"},
		{name: "rank equals size", env: ompi("4", "4"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_RANK"},
		{name: "negative rank", env: ompi("-1", "4"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_RANK"},
		{name: "non-numeric size", env: ompi("0", "four"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_SIZE"},
		{name: "size with space", env: ompi("0", " 4"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_SIZE"},
		{name: "size plus sign", env: ompi("0", "+4"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_SIZE"},
		{name: "empty rank", env: ompi("", "4"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_RANK"},
		{name: "huge size", env: ompi("0", "99999999999"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_SIZE"},
		{name: "size zero", env: ompi("0", "0"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_SIZE"},
		{name: "rank missing", env: []string{"OMPI_COMM_WORLD_SIZE=4"}, err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_RANK"},
		{name: "local rank not below local size", env: ompi("1", "4", "OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_LOCAL_RANK"},
		{name: "local size above size", env: ompi("1", "4", "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=5"), err: ErrInconsistent, errVar: "OMPI_COMM_WORLD_LOCAL_SIZE"},
		{name: "hydra rank not below size", env: []string{"MPI_LOCALRANKID=0", "PMI_RANK=2", "PMI_SIZE=2"}, err: ErrInconsistent, errVar: "PMI_RANK"},
		{name: "slurm step id garbage", env: []string{"SLURM_STEP_ID=batch", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=0"}, err: ErrInconsistent, errVar: "SLURM_STEP_ID"},
		{name: "slurm procid missing", env: []string{"SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=2"}, err: ErrInconsistent, errVar: "SLURM_PROCID"},
		{name: "slurm tasks per node total", env: []string{"SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=4", "SLURM_PROCID=0", "SLURM_NODEID=0", "SLURM_STEP_TASKS_PER_NODE=2(x3)"}, err: ErrInconsistent, errVar: "SLURM_STEP_TASKS_PER_NODE"},
		{name: "slurm node outside list", env: []string{"SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=4", "SLURM_PROCID=0", "SLURM_NODEID=2", "SLURM_STEP_TASKS_PER_NODE=2(x2)"}, err: ErrInconsistent, errVar: "SLURM_STEP_TASKS_PER_NODE"},
		{name: "slurm tasks per node garbage", env: []string{"SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=4", "SLURM_PROCID=0", "SLURM_NODEID=0", "SLURM_STEP_TASKS_PER_NODE=2(3)"}, err: ErrInconsistent, errVar: "SLURM_STEP_TASKS_PER_NODE"},
		{name: "slurm local id not below tasks on node", env: []string{"SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=3", "SLURM_PROCID=2", "SLURM_NODEID=1", "SLURM_LOCALID=1", "SLURM_STEP_TASKS_PER_NODE=2,1"}, err: ErrInconsistent, errVar: "SLURM_LOCALID"},
		{name: "torchrun local rank not below local world size", env: []string{"TORCHELASTIC_RUN_ID=x", "RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"}, err: ErrInconsistent, errVar: "LOCAL_RANK"},
		{name: "torchrun rank garbage", env: []string{"TORCHELASTIC_RUN_ID=x", "RANK=one", "WORLD_SIZE=4"}, err: ErrInconsistent, errVar: "RANK"},
		{name: "torchrun rank not below world size", env: []string{"TORCHELASTIC_RUN_ID=x", "RANK=4", "WORLD_SIZE=4"}, err: ErrInconsistent, errVar: "RANK"},
		{name: "torchrun without RANK is not a worker", env: []string{"TORCHELASTIC_RUN_ID=x"}, launcher: launcher.None, size: 1, mode: ModeWrite},
		{name: "RANK alone is not a launcher", env: []string{"RANK=3", "WORLD_SIZE=4"}, launcher: launcher.None, size: 1, mode: ModeWrite},
		{name: "env rendezvous", env: []string{"RANK=3", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1"}, launcher: launcher.TorchEnv, mpi: true, rank: 3, size: 4, mode: ModeBundle},
		{name: "env rendezvous one task", env: []string{"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=h", "MASTER_PORT=1"}, launcher: launcher.TorchEnv, size: 1, mode: ModeWrite},
		{name: "env rendezvous bad local size", env: []string{"RANK=3", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1", "LOCAL_SIZE=0"}, err: ErrInconsistent, errVar: "LOCAL_SIZE"},
		{name: "cray_shasta rank mismatch", env: append([]string{"PALS_RANKID=0", "PALS_APID=9.0"}, step...), err: ErrInconsistent, errVar: "PALS_RANKID"},
		{name: "flux size zero", env: []string{"FLUX_TASK_RANK=0", "FLUX_JOB_SIZE=0"}, err: ErrInconsistent, errVar: "FLUX_JOB_SIZE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := map[string]string{}
			for _, kv := range tt.env {
				k, v, _ := strings.Cut(kv, "=")
				m[k] = v
			}
			r, err := Detect(mapLookup(m))
			mode := Mode("")
			if err == nil {
				mode, err = ModeFromEnv(mapLookup(m), r)
			}
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				if !strings.Contains(err.Error(), tt.errVar) {
					t.Errorf("error %q does not name %s", err, tt.errVar)
				}
				if tt.err == ErrInvalidMode {
					for _, m := range Modes {
						if !strings.Contains(err.Error(), string(m)) {
							t.Errorf("error %q does not list mode %s", err, m)
						}
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if r.Launcher != tt.launcher || r.MPI != tt.mpi || r.Rank != tt.rank || r.Size != tt.size || mode != tt.mode {
				t.Errorf("got %s mpi=%v rank %d of %d mode %s, want %s mpi=%v rank %d of %d mode %s (reason: %s)",
					r.Launcher, r.MPI, r.Rank, r.Size, mode, tt.launcher, tt.mpi, tt.rank, tt.size, tt.mode, r.Reason)
			}
		})
	}
}

func TestDetectNilLookup(t *testing.T) {
	r, err := Detect(nil)
	if m, merr := ModeFromEnv(nil, r); err != nil || merr != nil || r.Launcher != launcher.None || r.MPI || m != ModeWrite {
		t.Fatalf("Detect(nil) = %+v, %v", r, err)
	}
}

func TestReasonMentionsIgnoredOuterLauncher(t *testing.T) {
	env := readEnv(t, filepath.Join("testdata", "cases", "nest-mpirun-in-srun-step", "rank5.env"))
	r, err := Detect(mapLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Reason, "Open MPI") || !strings.Contains(r.Reason, "Slurm") {
		t.Errorf("reason %q should name Open MPI and the ignored Slurm step", r.Reason)
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range Modes {
		got, err := ParseMode(string(m))
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	for _, bad := range []string{"", "WRITE", "bundle ", "rw"} {
		if _, err := ParseMode(bad); !errors.Is(err, ErrInvalidMode) {
			t.Errorf("ParseMode(%q): err = %v, want ErrInvalidMode", bad, err)
		}
	}
}

func TestMayStore(t *testing.T) {
	tests := []struct {
		name string
		m    Mode
		r    Result
		want bool
	}{
		{"workstation write", ModeWrite, Result{Size: 1}, true},
		{"mpi rank 0 write", ModeWrite, Result{MPI: true, Rank: 0, Size: 4}, true},
		{"mpi rank 1 write", ModeWrite, Result{MPI: true, Rank: 1, Size: 4}, false},
		{"read", ModeRead, Result{Size: 1}, false},
		{"bundle", ModeBundle, Result{MPI: true, Size: 4}, false},
		{"off", ModeOff, Result{Size: 1}, false},
	}
	for _, tt := range tests {
		if got := tt.m.MayStore(tt.r); got != tt.want {
			t.Errorf("%s: MayStore() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCheckComm(t *testing.T) {
	slurm4 := Result{Launcher: launcher.Slurm, MPI: true, Rank: 2, Size: 4}
	tests := []struct {
		name       string
		r          Result
		rank, size int
		warn       bool
		mention    string
	}{
		{"agree", slurm4, 2, 4, false, ""},
		{"agree not mpi", Result{Launcher: launcher.None, Rank: 0, Size: 1}, 0, 1, false, ""},
		{"unknown size agrees on rank", Result{Launcher: launcher.MPICH, MPI: true, Rank: 1, Size: Unknown}, 1, 2, false, ""},
		{"srun pmix mpich singleton", slurm4, 0, 1, true, "singleton"},
		{"env says none but mpi says 4", Result{Launcher: launcher.None, Rank: 0, Size: 1}, 0, 4, true, "rank 0 of 4"},
		{"rank differs", slurm4, 3, 4, true, "rank 3 of 4"},
		{"impossible comm", slurm4, 4, 4, true, "impossible"},
		{"zero size comm", slurm4, 0, 0, true, "impossible"},
	}
	for _, tt := range tests {
		w := CheckComm(tt.r, tt.rank, tt.size)
		if (w != "") != tt.warn {
			t.Errorf("%s: CheckComm = %q, want warning %v", tt.name, w, tt.warn)
		}
		if strings.Contains(w, "\n") {
			t.Errorf("%s: warning %q is not one line", tt.name, w)
		}
		if tt.mention != "" && !strings.Contains(w, tt.mention) {
			t.Errorf("%s: warning %q does not mention %q", tt.name, w, tt.mention)
		}
	}
}

// TestFamiliesMatchTable keeps the re-exported constants and the table
// in step: every family but None has exactly one entry.
func TestFamiliesMatchTable(t *testing.T) {
	for _, f := range []launcher.Family{launcher.OpenMPI, launcher.MPICH, launcher.IntelMPI, launcher.MVAPICH2, launcher.PALS, launcher.ALPS, launcher.Slurm, launcher.Flux, launcher.TorchElastic, launcher.TorchEnv} {
		if _, ok := launcher.Lookup(f); !ok {
			t.Errorf("family %s has no launcher.Table entry", f)
		}
	}
	if len(launcher.Table) != 10 {
		t.Errorf("launcher.Table has %d entries, want 10", len(launcher.Table))
	}
}

// TestInvalidModeKeepsLauncherFacts is the regression test for a bug: an
// invalid KBUNDLE_MODE made Detect drop the launcher's answer, so a rank-1
// task looked like a plain process (and extracted). The launcher facts must
// not depend on KBUNDLE_MODE at all; only ModeFromEnv rejects the value.
func TestInvalidModeKeepsLauncherFacts(t *testing.T) {
	base := map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
		"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
	want, err := Detect(mapLookup(base))
	if err != nil || !want.MPI || want.Rank != 1 {
		t.Fatalf("Detect = %+v, %v", want, err)
	}
	for _, v := range []string{"bogus", "write", "off", "", "Write"} {
		env := map[string]string{ModeEnv: v}
		for k, x := range base {
			env[k] = x
		}
		got, err := Detect(mapLookup(env))
		if err != nil || got != want {
			t.Errorf("KBUNDLE_MODE=%q: Detect = %+v, %v; want %+v", v, got, err, want)
		}
		m, err := ModeFromEnv(mapLookup(env), got)
		switch v {
		case "bogus", "Write":
			if !errors.Is(err, ErrInvalidMode) || !strings.Contains(err.Error(), ModeEnv) {
				t.Errorf("KBUNDLE_MODE=%q: ModeFromEnv err = %v, want ErrInvalidMode naming %s", v, err, ModeEnv)
			}
		case "":
			if err != nil || m != ModeBundle {
				t.Errorf("KBUNDLE_MODE empty: mode %q, %v; want the default bundle", m, err)
			}
		default:
			if err != nil || string(m) != v {
				t.Errorf("KBUNDLE_MODE=%q: mode %q, %v", v, m, err)
			}
		}
	}
}
