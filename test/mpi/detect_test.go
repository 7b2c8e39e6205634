package mpi

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/internal/testutil"
)

// buildDetectRanks compiles testdata/detect_ranks.c with v's mpicc.
func buildDetectRanks(t *testing.T, v testutil.Variant) string {
	t.Helper()
	cc := testutil.CC(v)
	out := filepath.Join(t.TempDir(), "detect_ranks")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cc, "-O1", "-o", out, filepath.Join("testdata", "detect_ranks.c"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, b)
	}
	return out
}

// TestDetectLive runs `kbundle detect --json` in every rank of real
// launches (mpirun.openmpi, mpiexec.hydra; np 1, 2, 4), from a C program
// that then asks MPI_COMM_WORLD, and checks the environment's answer
// against MPI's own.
func TestDetectLive(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			testutil.NeedMPI(t, v)
			prog := buildDetectRanks(t, v)
			family := "openmpi"
			if v == testutil.MPICH {
				family = "mpich"
			}
			for _, np := range []int{1, 2, 4} {
				t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
					// KBUNDLE_MODE= keeps a caller's override out of the default-mode check.
					so, se, code := testutil.RunMPI(t, v, np, []string{"KBUNDLE_MODE="}, prog, kb)
					if code != 0 {
						t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", testutil.Describe(v, np), code, so, se)
					}
					checkLive(t, so, np, family, true)
				})
			}
		})
	}
}

// liveLine is one KBDETECT line: what MPI_COMM_WORLD said and what
// `kbundle detect --json` said before MPI_Init.
type liveLine struct {
	commRank, commSize int
	d                  detect.Result
	mode               detect.Mode // kbundle detect prints the mode beside the launcher facts
}

func parseLive(t *testing.T, out string) []liveLine {
	t.Helper()
	var lines []liveLine
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "KBDETECT ")
		if !ok {
			continue
		}
		f := strings.SplitN(rest, " ", 3)
		if len(f) != 3 {
			t.Fatalf("malformed line %q", line)
		}
		var l liveLine
		var err1, err2 error
		l.commRank, err1 = strconv.Atoi(f[0])
		l.commSize, err2 = strconv.Atoi(f[1])
		err3 := json.Unmarshal([]byte(f[2]), &l.d)
		if err3 == nil {
			var m struct {
				Mode detect.Mode `json:"mode"`
			}
			err3 = json.Unmarshal([]byte(f[2]), &m)
			l.mode = m.Mode
		}
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("malformed line %q: %v %v %v", line, err1, err2, err3)
		}
		lines = append(lines, l)
	}
	return lines
}

// checkLive checks np KBDETECT lines; inOrder: local ranks are the global
// ones (one node), else only a permutation of them (Open MPI 5 maps 4
// ranks on one node to local ranks 0, 2, 1, 3).
func checkLive(t *testing.T, out string, np int, family string, inOrder bool) {
	t.Helper()
	seen := make([]bool, np)
	local := map[int]bool{}
	n := 0
	for _, l := range parseLive(t, out) {
		commRank, commSize, d, mode := l.commRank, l.commSize, l.d, l.mode
		n++
		if commSize != np || commRank < 0 || commRank >= np || seen[commRank] {
			t.Fatalf("MPI says rank %d of %d (np %d, seen %v)", commRank, commSize, np, seen)
		}
		seen[commRank] = true
		wantMode := "write"
		if np > 1 {
			wantMode = "bundle"
		}
		if string(d.Launcher) != family || d.MPI != (np > 1) || d.Rank != commRank || d.Size != commSize || string(mode) != wantMode {
			t.Errorf("rank %d of %d: detect says launcher=%s mpi=%v rank %d of %d mode %s (%s); want %s mpi=%v rank %d of %d mode %s",
				commRank, commSize, d.Launcher, d.MPI, d.Rank, d.Size, mode, d.Reason, family, np > 1, commRank, commSize, wantMode)
		}
		if w := detect.CheckComm(d, commRank, commSize); w != "" {
			t.Errorf("rank %d: CheckComm warns on a consistent launch: %s", commRank, w)
		}
		// One node: local rank and size are the global ones.
		if (inOrder && d.LocalRank != commRank) || d.LocalSize != commSize || d.LocalRank < 0 || d.LocalRank >= np || local[d.LocalRank] {
			t.Errorf("rank %d: local rank %d of %d, want %d of %d", commRank, d.LocalRank, d.LocalSize, commRank, commSize)
		}
		local[d.LocalRank] = true
		if d.Node != detect.Unknown { // no launcher here exports a node id
			t.Errorf("rank %d: node %d, want %d", commRank, d.Node, detect.Unknown)
		}
	}
	if n != np {
		t.Fatalf("got %d KBDETECT lines, want %d:\n%s", n, np, out)
	}
}

// TestDetectLiveMismatch starts an MPICH program under Open MPI's mpirun:
// the environment says 2 ranks but MPICH finds no PMI it knows and starts
// every rank as a singleton (as MPICH does under srun --mpi=pmix), so
// CheckComm must warn on each rank.
func TestDetectLiveMismatch(t *testing.T) {
	testutil.NeedMPI(t, testutil.MPICH)
	testutil.NeedMPI(t, testutil.OpenMPI)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	prog := buildDetectRanks(t, testutil.MPICH)
	so, se, code := testutil.RunMPI(t, testutil.OpenMPI, 2, []string{"KBUNDLE_MODE="}, prog, kb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, so, se)
	}
	lines := parseLive(t, so)
	if len(lines) != 2 {
		t.Fatalf("got %d KBDETECT lines, want 2:\n%s\n%s", len(lines), so, se)
	}
	for _, l := range lines {
		if l.commSize != 1 || l.d.Size != 2 || !l.d.MPI {
			t.Fatalf("expected env size 2 and MPI singleton, got %+v", l)
		}
		w := detect.CheckComm(l.d, l.commRank, l.commSize)
		if !strings.Contains(w, "singleton") || !strings.Contains(w, "of 2") {
			t.Errorf("CheckComm(%+v, %d, %d) = %q, want a singleton warning", l.d, l.commRank, l.commSize, w)
		}
		t.Logf("warning: %s", w)
	}
}
