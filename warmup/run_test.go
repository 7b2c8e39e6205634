package warmup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sh(t *testing.T, dir, script string, env ...string) (*Result, string, error) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, &Options{
		Argv:   []string{"sh", "-c", script},
		Env:    append([]string{"PATH=" + os.Getenv("PATH")}, env...),
		Dir:    dir,
		Stdout: &out,
		Stderr: &out,
	})
	return res, out.String(), err
}

func TestRunExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		code   int
		sig    syscall.Signal
	}{
		{"success", "exit 0", 0, 0},
		{"failure", "exit 3", 3, 0},
		{"high status", "exit 200", 200, 0},
		{"killed", "kill -KILL $$", 128 + 9, syscall.SIGKILL},
		{"terminated", "kill -TERM $$", 128 + 15, syscall.SIGTERM},
		{"segfault", "kill -SEGV $$", 128 + 11, syscall.SIGSEGV},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, out, err := sh(t, t.TempDir(), tc.script)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if res.ExitCode != tc.code || res.Signal != tc.sig {
				t.Errorf("exit %d signal %v, want %d %v", res.ExitCode, res.Signal, tc.code, tc.sig)
			}
			if res.Failed() != (tc.code != 0) {
				t.Errorf("Failed() = %v", res.Failed())
			}
		})
	}
}

func TestRunDeltaAndEnv(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "old"), 5)
	res, out, err := sh(t, dir, `echo "v=$KB_TEST_VAR"; mkdir -p "$D/numba"; head -c 4096 /dev/zero > "$D/numba/f.nbc"; rm "$D/old"`,
		"KB_TEST_VAR=hello", "D="+dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "v=hello" {
		t.Errorf("child output %q", out)
	}
	if len(res.Delta.Added) != 1 || res.Delta.Added[0].Path != "numba/f.nbc" || res.Delta.AddedBytes != 4096 {
		t.Errorf("added %+v", res.Delta.Added)
	}
	if len(res.Delta.Removed) != 1 {
		t.Errorf("removed %+v", res.Delta.Removed)
	}
}

func TestRunEmptyEnvIsNotInherited(t *testing.T) {
	t.Setenv("KB_SHOULD_NOT_LEAK", "1")
	var out bytes.Buffer
	res, err := Run(context.Background(), &Options{
		Argv: []string{"/bin/sh", "-c", `test -z "$KB_SHOULD_NOT_LEAK"`}, Dir: t.TempDir(), Stdout: &out,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("parent variable leaked into a nil Env: %v %+v", err, res)
	}
}

func TestRunStartErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600)
	for _, tc := range []struct {
		name string
		argv []string
		err  error
	}{
		{"empty", nil, ErrNoCommand},
		{"not found", []string{"kbundle-no-such-command"}, ErrStart},
		{"not found path", []string{"/no/such/cmd"}, ErrStart},
		{"not executable", []string{notExec}, ErrStart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), &Options{Argv: tc.argv, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir})
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
		})
	}
}

// A SIGTERM sent to the warm-up process reaches the child, whose exit
// status is reported.
func TestRunForwardsSIGTERM(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	go func() {
		for i := 0; i < 200; i++ {
			if _, err := os.Stat(ready); err == nil {
				syscall.Kill(os.Getpid(), syscall.SIGTERM)
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
	}()
	res, out, err := sh(t, dir, `trap 'exit 42' TERM; touch "$R"; i=0; while [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; exit 1`, "R="+ready)
	if err != nil {
		t.Fatal(err, out)
	}
	if res.ExitCode != 42 {
		t.Errorf("exit %d, want 42 (child's SIGTERM trap)", res.ExitCode)
	}
}

func TestSignalName(t *testing.T) {
	if SignalName(syscall.SIGKILL) != "SIGKILL" || SignalName(syscall.Signal(63)) != "signal 63" {
		t.Error("SignalName")
	}
}

// V4: a command found only through a relative or empty PATH entry (one
// that names a directory by the current one) is not run, as Go's
// exec.LookPath refuses it (ErrDot): the error names the entry and the
// fix. An absolute entry later in PATH is used instead.
func TestLookPathRelativeEntries(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, d := range []string{"bin", "abs"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile("tool", []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(dir, "abs")
	for _, tc := range []struct {
		name, path string
		want       string   // the path found, or "" for an error
		msg        []string // in the error
		dot        bool     // the error matches exec.ErrDot
	}{
		{"absolute", abs, filepath.Join(abs, "tool"), nil, false},
		{"relative then absolute", "bin:" + abs, filepath.Join(abs, "tool"), nil, false},
		{"empty then absolute", ":" + abs, filepath.Join(abs, "tool"), nil, false},
		{"relative only", "bin:/nonexistent", "", []string{`tool was found only through the relative PATH entry "bin"`, "give its path (./bin/tool) or put an absolute directory in PATH"}, true},
		{"dot", ".", "", []string{`relative PATH entry "."`, "(./tool)"}, true},
		{"empty entry", "/nonexistent:", "", []string{"the empty PATH entry (the current directory)", "(./tool)"}, true},
		{"parent", "../" + filepath.Base(dir) + "/bin", "", []string{"(../" + filepath.Base(dir) + "/bin/tool)"}, true},
		{"nowhere", "/nonexistent", "", []string{exec.ErrNotFound.Error()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lookPath("tool", []string{"PATH=" + tc.path})
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("lookPath = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("lookPath = %q, want an error", got)
			}
			if !errors.Is(err, exec.ErrNotFound) || errors.Is(err, exec.ErrDot) != tc.dot {
				t.Errorf("error %v: ErrNotFound %v, ErrDot %v; want true, %v", err, errors.Is(err, exec.ErrNotFound), errors.Is(err, exec.ErrDot), tc.dot)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not say %q", err, m)
				}
			}
		})
	}
}

// V4's reproducer: Run does not run bin/python3 through PATH=bin.
func TestRunRelativePATHNotRun(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("bin", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("bin/python3", []byte("#!/bin/sh\n: > ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), &Options{Argv: []string{"python3"}, Env: []string{"PATH=bin:/nonexistent"}, Dir: t.TempDir()})
	if !errors.Is(err, ErrStart) || !errors.Is(err, exec.ErrDot) {
		t.Errorf("error %v, want ErrStart and exec.ErrDot", err)
	}
	if _, serr := os.Stat("ran"); serr == nil {
		t.Error("bin/python3 ran through the relative PATH entry")
	}
}
