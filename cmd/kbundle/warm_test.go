package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/launcher"
)

func TestWarmCommand(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	// A fake launcher environment: the child must see none of it.
	var launcherEnv []string
	for _, n := range launcher.Names() {
		launcherEnv = append(launcherEnv, n+"=7")
	}
	userEnv := append([]string{"KB_USER_VAR=kept"}, launcherEnv...)

	tests := []struct {
		name       string
		args       []string
		script     string
		code       int
		stdout     string   // exact, after trimming
		stderr     []string // substrings
		noStderr   []string
		wantBundle bool
	}{
		{name: "preset vars set, launcher vars removed, user vars kept",
			args:   []string{"--preset", "tack"},
			script: `echo "$TACK_CACHE:$KB_USER_VAR:$(env | grep -c -e OMPI_COMM_WORLD -e PMI_RANK -e SLURM_PROCID -e FLUX_TASK_RANK)"; mkdir -p "$TACK_CACHE_DIR/k"; head -c 3000 /dev/zero > "$TACK_CACHE_DIR/k/a.bin"`,
			stdout: "write:kept:0",
			stderr: []string{"setting TACK_CACHE_DIR=", "1 added (2.9 KiB)", "tack/: 1 new or changed", "tack/k/a.bin"},
		},
		{name: "exit status passes through",
			script: "exit 5", code: 5,
			stderr: []string{"kbundle: command exited with status 5"},
		},
		{name: "signal reported", args: []string{"--pack"},
			script: "kill -KILL $$", code: 137,
			stderr:   []string{"kbundle: command killed by signal SIGKILL; not packing"},
			noStderr: []string{"packed"},
		},
		{name: "nothing added warns",
			script: "true",
			stderr: []string{"warning: the run added nothing"},
		},
		{name: "pack after success", args: []string{"--preset", "numba", "--pack"},
			script:     `head -c 10000 /dev/urandom > "$NUMBA_CACHE_DIR/x.nbc"`,
			stderr:     []string{"packed 1 files"},
			wantBundle: true,
		},
		{name: "unknown preset", args: []string{"--preset", "nope"}, script: "true", code: exitUsage,
			stderr: []string{`unknown preset "nope"`, "numba"}},
		{name: "output needs pack", args: []string{"-o", "x.kbundle"}, script: "true", code: exitUsage,
			stderr: []string{"needs --pack"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cache")
			args := append([]string{kb, "warm", "--dir", dir}, tc.args...)
			args = append(args, "--", "/bin/sh", "-c", tc.script)
			stdout, stderr, code := testutil.Run(t, userEnv, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			if tc.stdout != "" && strings.TrimSpace(stdout) != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout, tc.stdout)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
			for _, s := range tc.noStderr {
				if strings.Contains(stderr, s) {
					t.Errorf("stderr has %q:\n%s", s, stderr)
				}
			}
			out := filepath.Join(dir, "cache.kbundle")
			_, err := os.Stat(out)
			if tc.wantBundle != (err == nil) {
				t.Fatalf("bundle exists: %v, want %v", err == nil, tc.wantBundle)
			}
			if tc.wantBundle {
				r, err := bundle.Open(out, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if got := r.Meta()[bundle.MetaPreset]; got != "numba" {
					t.Errorf("preset metadata %q", got)
				}
				if got := r.Meta()[bundle.MetaOrigin]; got != dir {
					t.Errorf("origin metadata %q, want %s", got, dir)
				}
				for _, e := range r.Entries() {
					if strings.HasSuffix(e.Name, ".kbundle") {
						t.Errorf("bundle packed itself: %s", e.Name)
					}
				}
			}
		})
	}
}

func TestWarmUsage(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		code int
		msg  string
	}{
		{"no command", []string{"warm", "--dir", t.TempDir()}, nil, exitUsage, "no command to run"},
		{"no dir", []string{"warm", "--", "true"}, []string{"KBUNDLE_CACHE_DIR="}, exitUsage, "no cache directory"},
		{"not found", []string{"warm", "--dir", t.TempDir(), "--", "kbundle-no-such-program"}, nil, exitNotFound, "cannot start command"},
		{"bad level", []string{"warm", "--dir", t.TempDir(), "--pack", "--level", "ultra", "--", "true"}, nil, exitUsage, "ultra"},
		{"output dir missing", []string{"warm", "--dir", t.TempDir(), "--pack", "-o", "/nonexistent/x.kbundle", "--", "true"}, nil, exitUsage, "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := testutil.Run(t, tc.env, append([]string{kb}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) || !strings.HasPrefix(stderr, "kbundle: ") {
				t.Errorf("exit %d stderr %q; want %d and %q", code, stderr, tc.code, tc.msg)
			}
		})
	}
}

func TestWarmDirFromEnvAndPresetList(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	dir := t.TempDir()
	stdout, stderr, code := testutil.Run(t, []string{"KBUNDLE_CACHE_DIR=" + dir, "KBUNDLE_PRESET=numba pyopencl"},
		kb, "warm", "--", "/bin/sh", "-c", `echo "$NUMBA_CACHE_DIR $XDG_CACHE_HOME $POCL_CACHE_DIR"`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := filepath.Join(dir, "numba") + " " + filepath.Join(dir, "xdg") + " " + filepath.Join(dir, "pocl")
	if strings.TrimSpace(stdout) != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	if fi, err := os.Stat(filepath.Join(dir, "pocl")); err != nil || !fi.IsDir() {
		t.Errorf("pocl directory not created before the run")
	}
}

func TestPresetsCommand(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	stdout, _, code := testutil.Run(t, nil, kb, "presets", "--json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var got []struct {
		Name string   `json:"name"`
		Env  []string `json:"env"`
		Vars []struct {
			Name, Source string
		} `json:"vars"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{}
	for _, p := range got {
		names[p.Name] = p.Env
		for _, v := range p.Vars {
			if v.Source == "" {
				t.Errorf("%s: %s has no source", p.Name, v.Name)
			}
		}
	}
	for _, n := range []string{"tack", "triton", "inductor", "jax", "numba", "cupy", "pocl", "pyopencl", "cuda", "julia"} {
		if _, ok := names[n]; !ok {
			t.Errorf("preset %s missing from --json", n)
		}
	}
	if e := strings.Join(names["inductor"], " "); !strings.Contains(e, "TRITON_CACHE_DIR=DIR/triton") {
		t.Errorf("inductor env %q lacks triton's", e)
	}
	text, _, code := testutil.Run(t, nil, kb, "presets")
	if code != 0 || !strings.Contains(text, "NUMBA_CACHE_DIR=DIR/numba") || !strings.Contains(text, "writable") {
		t.Errorf("presets text output:\n%s", text)
	}
	if _, stderr, code := testutil.Run(t, nil, kb, "presets", "extra"); code != exitUsage {
		t.Errorf("presets extra: exit %d %s", code, stderr)
	}
}
