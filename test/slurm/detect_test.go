package slurm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestDetectSrun runs `kbundle detect --json` as srun steps outside any
// batch job: one task is not an MPI launch, two are.
func TestDetectSrun(t *testing.T) {
	needSlurm(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	for _, c := range []struct {
		name string
		np   int
		args []string
		mpi  bool
		mode string
	}{
		{"n1", 1, []string{"-n", "1"}, false, "write"},
		{"n2-overcommit", 2, []string{"-n", "2", "-O"}, true, "bundle"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			argv := append(append([]string{"srun"}, c.args...), "sh", "-c", detectCmd, kb, dir)
			so, se, code := run(t, nil, dir, argv...)
			if code != 0 {
				t.Fatalf("%q: exit %d\n%s%s", argv, code, so, se)
			}
			checkDetections(t, readDetections(t, dir), c.np, "slurm", c.mpi, c.mode)
		})
	}
}

// detectJob is the batch script of TestDetectInBatch: kbundle detect on
// the batch script's own line, under srun, under Open MPI's mpirun and
// under MPICH's mpiexec.hydra, each into its own folder.
const detectJob = `#!/bin/bash
set -u
kb=$1 out=$2
d='exec "$0" detect --json > "$1/detect.$$.json"'
mkdir -p "$out/batch" "$out/srun" "$out/openmpi" "$out/mpich"
sh -c "$d" "$kb" "$out/batch"; echo "batch exit $?"
srun -n 2 sh -c "$d" "$kb" "$out/srun"; echo "srun exit $?"
mpirun.openmpi -np 2 --oversubscribe --allow-run-as-root sh -c "$d" "$kb" "$out/openmpi"; echo "openmpi exit $?"
mpiexec.hydra -n 2 sh -c "$d" "$kb" "$out/mpich"; echo "mpich exit $?"
`

// TestDetectInBatch checks detection inside an sbatch job: the batch script
// itself is a plain process (launcher none, write mode), srun's tasks are
// Slurm ranks, and an MPI launcher's ranks are its own (its variables win
// over the allocation's stale Slurm ones).
func TestDetectInBatch(t *testing.T) {
	needSlurm(t)
	testutil.NeedMPI(t, testutil.OpenMPI)
	testutil.NeedMPI(t, testutil.MPICH)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	dir := t.TempDir()
	script := filepath.Join(dir, "detect.sbatch")
	if err := os.WriteFile(script, []byte(detectJob), 0o755); err != nil {
		t.Fatal(err)
	}
	j := submit(t, dir, "kbundle-detect", testutil.MPIEnv, []string{"-n", "2"}, script, kb, dir)
	j.requireState(t, "COMPLETED", 0)
	for _, c := range []struct {
		sub, launcher string
		np            int
		mpi           bool
		mode          string
	}{
		{"batch", "none", 1, false, "write"},
		{"srun", "slurm", 2, true, "bundle"},
		{"openmpi", "openmpi", 2, true, "bundle"},
		{"mpich", "mpich", 2, true, "bundle"},
	} {
		t.Run(c.sub, func(t *testing.T) {
			ds := readDetections(t, filepath.Join(dir, c.sub))
			if len(ds) != c.np {
				t.Fatalf("want %d detections, got %d\n%s", c.np, len(ds), j)
			}
			checkDetections(t, ds, c.np, c.launcher, c.mpi, c.mode)
		})
	}
}
