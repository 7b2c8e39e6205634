package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// runDetect runs the built kbundle with exactly env (nothing inherited).
func runDetect(t *testing.T, kb string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kb, append([]string{"detect"}, args...)...)
	cmd.Env = env
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("kbundle detect: %v", err)
	}
	return so.String(), se.String(), code
}

// fixtureEnv reads a launcher fixture as an environment list.
func fixtureEnv(t *testing.T, rel string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "detect", "testdata", rel))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		if line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	return env
}

func TestDetectCommand(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	fields := []string{"launcher", "mpi", "rank", "size", "local_rank", "local_size", "node", "mode", "reason"}
	tests := []struct {
		name    string
		env     []string
		args    []string
		code    int
		want    map[string]any // JSON fields to check (numbers as float64)
		stderr  string         // must appear in stderr
		noJSON  bool
		inHuman string // must appear in the human output
	}{
		{name: "plain process", env: []string{"PATH=/usr/bin"}, args: []string{"--json"},
			want: map[string]any{"launcher": "none", "mpi": false, "rank": 0.0, "size": 1.0, "node": -1.0, "mode": "write"}},
		{name: "open mpi rank 2 of 4", env: fixtureEnv(t, "launchers/openmpi-np4/rank2.env"), args: []string{"--json"},
			want: map[string]any{"launcher": "openmpi", "mpi": true, "rank": 2.0, "size": 4.0, "local_rank": 2.0, "local_size": 4.0, "node": -1.0, "mode": "bundle"}},
		{name: "slurm batch script", env: fixtureEnv(t, "launchers/slurm-sbatch-script/rank0.env"), args: []string{"--json"},
			want: map[string]any{"launcher": "none", "mpi": false, "mode": "write"}},
		{name: "slurm srun node known", env: fixtureEnv(t, "launchers/slurm-srun-n2/rank1.env"), args: []string{"--json"},
			want: map[string]any{"launcher": "slurm", "mpi": true, "rank": 1.0, "size": 2.0, "local_size": 2.0, "node": 0.0}},
		{name: "mode override", env: append(fixtureEnv(t, "launchers/mpich-hydra-np4/rank3.env"), "KBUNDLE_MODE=read"), args: []string{"--json"},
			want: map[string]any{"launcher": "mpich", "rank": 3.0, "mode": "read"}},
		{name: "human", env: fixtureEnv(t, "cases/pals-pbs-np4/rank3.env"),
			inHuman: "yes, rank 3 of 4"},
		{name: "human unknown size", env: fixtureEnv(t, "cases/alps-np2/rank1.env"),
			inHuman: "rank 1 of unknown"},
		{name: "invalid mode", env: []string{"KBUNDLE_MODE=fast"}, args: []string{"--json"},
			code: exitUsage, stderr: "kbundle: KBUNDLE_MODE: invalid cache mode \"fast\": want one of write, read, bundle, off", noJSON: true},
		{name: "inconsistent", env: []string{"OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=4"}, args: []string{"--json"},
			code: exitError, stderr: "kbundle: inconsistent launcher variables: OMPI_COMM_WORLD_RANK=4", noJSON: true},
		{name: "unparsable", env: []string{"SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=x"},
			code: exitError, stderr: "SLURM_PROCID", noJSON: true},
		{name: "arguments", env: nil, args: []string{"extra"}, code: exitUsage, stderr: "kbundle: detect takes no arguments", noJSON: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			so, se, code := runDetect(t, kb, tt.env, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, so, se)
			}
			if tt.stderr != "" && !strings.Contains(se, tt.stderr) {
				t.Errorf("stderr %q lacks %q", se, tt.stderr)
			}
			for line := range strings.Lines(se) {
				if !strings.HasPrefix(line, "kbundle: ") {
					t.Errorf("stderr line %q lacks the kbundle: prefix", line)
				}
			}
			if tt.noJSON {
				if so != "" {
					t.Errorf("stdout %q, want nothing on failure", so)
				}
				return
			}
			if tt.inHuman != "" {
				if !strings.Contains(so, tt.inHuman) || !strings.Contains(so, "reason") {
					t.Errorf("human output lacks %q:\n%s", tt.inHuman, so)
				}
				return
			}
			if strings.Count(so, "\n") != 1 || !strings.HasSuffix(so, "\n") {
				t.Errorf("JSON output is not one line: %q", so)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(so), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, so)
			}
			var keys []string
			for k := range got {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			wantKeys := slices.Sorted(slices.Values(fields))
			if !slices.Equal(keys, wantKeys) {
				t.Errorf("JSON fields %q, want exactly %q", keys, wantKeys)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}
