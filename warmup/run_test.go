package warmup

import (
	"bytes"
	"context"
	"errors"
	"os"
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
