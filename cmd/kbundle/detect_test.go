package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/launcher"
)

// TestDetectCommand runs kbundle detect in process on the launcher
// fixtures that detect/ tests against. Plain, failing and KBUNDLE_MODE
// cases are in testdata/script/detect.txt.
func TestDetectCommand(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		env     []string
		want    map[string]any // JSON fields to check (numbers as float64)
		inHuman string         // must appear in the human output instead
	}{
		{name: "open mpi rank 2 of 4", fixture: "launchers/openmpi-np4/rank2.env",
			want: map[string]any{"launcher": "openmpi", "mpi": true, "rank": 2.0, "size": 4.0, "local_rank": 2.0, "local_size": 4.0, "node": -1.0, "mode": "bundle"}},
		{name: "slurm batch script", fixture: "launchers/slurm-sbatch-script/rank0.env",
			want: map[string]any{"launcher": "none", "mpi": false, "mode": "write"}},
		{name: "slurm srun node known", fixture: "launchers/slurm-srun-n2/rank1.env",
			want: map[string]any{"launcher": "slurm", "mpi": true, "rank": 1.0, "size": 2.0, "local_size": 2.0, "node": 0.0}},
		{name: "mode override", fixture: "launchers/mpich-hydra-np4/rank3.env", env: []string{"KBUNDLE_MODE=read"},
			want: map[string]any{"launcher": "mpich", "rank": 3.0, "mode": "read"}},
		{name: "human", fixture: "cases/pals-pbs-np4/rank3.env", inHuman: "yes, rank 3 of 4"},
		{name: "human unknown size", fixture: "cases/alps-np2/rank1.env", inHuman: "rank 1 of unknown"},
		// The mode is package detect's, and says nothing of the harvest
		// workflow, where every job stores new entries (issue 25, U32).
		{name: "human mode under mpirun", fixture: "launchers/openmpi-np4/rank2.env",
			inHuman: "mode        bundle, for Go programs that read it with package detect (they store new entries: no); kbundle's commands ignore it\n" +
				"harvest     whatever the mode, the framework compiles new entries into DEST, and kbundle harvest adds them to the set\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Exactly the fixture: no launcher variable of the test's own.
			for _, n := range append(launcher.Names(), "KBUNDLE_MODE", "SLURM_JOB_ID", "PBS_JOBID", "FLUX_URI") {
				t.Setenv(n, "")
				os.Unsetenv(n)
			}
			env, err := testutil.ReadEnvFixture(filepath.Join("..", "..", "detect", "testdata", tt.fixture))
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range tt.env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			for k, v := range env {
				t.Setenv(k, v)
			}
			args := []string{"kbundle", "detect", "--json"}
			if tt.inHuman != "" {
				args = args[:2]
			}
			var so, se bytes.Buffer
			if code := run(args, &so, &se); code != 0 || se.Len() > 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, so.String(), se.String())
			}
			if tt.inHuman != "" {
				if !strings.Contains(so.String(), tt.inHuman) || !strings.Contains(so.String(), "reason") {
					t.Errorf("human output lacks %q:\n%s", tt.inHuman, so.String())
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(so.Bytes(), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, so.String())
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}
