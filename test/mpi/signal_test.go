package mpi

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// bigTree writes n MiB of incompressible files (slow enough to interrupt).
func bigTree(t *testing.T, mib int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "big")
	b := make([]byte, 1<<20)
	for i := range mib {
		p := filepath.Join(dir, fmt.Sprintf("d%d", i%7), fmt.Sprintf("k%03d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		rand.Read(b)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// temps lists kbundle temporaries in dir.
func temps(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if strings.Contains(e.Name(), ".kbundle-tmp-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// interrupt starts cmd, waits until a temporary appears in watch, sends
// sig, and returns the exit status and how long the command took to end.
func interrupt(t *testing.T, cmd *exec.Cmd, watch string, sig syscall.Signal) (int, time.Duration, string) {
	t.Helper()
	var errb strings.Builder
	cmd.Stderr = &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(60 * time.Second)
	for len(temps(watch)) == 0 {
		select {
		case err := <-done:
			t.Fatalf("%v ended before a temporary appeared in %s: %v\n%s", cmd.Args, watch, err, errb.String())
		case <-deadline:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("no temporary in %s after 60 s", watch)
		case <-time.After(2 * time.Millisecond):
		}
	}
	start := time.Now()
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("%v still running 30 s after %v", cmd.Args, sig)
	}
	return cmd.ProcessState.ExitCode(), time.Since(start), errb.String()
}

// packFastest packs tree with `kbundle pack --level fastest` into a fresh
// store and returns the bundle's path.
func packFastest(t *testing.T, kb, tree string) string {
	t.Helper()
	store := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(store, "cache.kbundle")
	if _, stderr, code := testutil.Run(t, nil, kb, "pack", "--level", "fastest", "--dir", tree, "-o", file); code != 0 {
		t.Fatalf("pack: %s", stderr)
	}
	return file
}

// TestSignalsLeaveNothing: SIGTERM, SIGINT and SIGHUP during pack,
// extract, warm --pack and load (under mpirun) end the command within a
// bounded time with 128+N (mpirun: non-zero) and leave no temporary file
// or tree.
func TestSignalsLeaveNothing(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	tree := bigTree(t, 160)
	bundleFile := packFastest(t, kb, tree)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run("pack/"+sig.String(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "b.kbundle")
			code, took, stderr := interrupt(t, exec.Command(kb, "pack", "--level", "best", "--dir", tree, "-o", out), filepath.Dir(out), sig)
			check(t, code, 128+int(sig), took, stderr, filepath.Dir(out))
		})
		t.Run("extract/"+sig.String(), func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "dest")
			code, took, stderr := interrupt(t, exec.Command(kb, "extract", "--jobs", "1", bundleFile, dest), filepath.Dir(dest), sig)
			check(t, code, 128+int(sig), took, stderr, filepath.Dir(dest))
		})
		t.Run("warm-pack/"+sig.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "kcache")
			cmd := exec.Command(kb, "warm", "--preset", "numba", "--dir", dir, "--pack", "--level", "best", "--",
				"sh", "-c", `cp -r "$1"/. "$NUMBA_CACHE_DIR"/`, "sh", tree)
			code, took, stderr := interrupt(t, cmd, dir, sig)
			check(t, code, 128+int(sig), took, stderr, dir)
		})
	}
	for _, v := range testutil.MPIVariants {
		t.Run("load/"+string(v), func(t *testing.T) {
			kbm := testutil.Kbundle(t, v)
			dest := filepath.Join(t.TempDir(), "dest")
			cmd := testutil.MPICommand(context.Background(), v, 2, kbm, "load", "--jobs", "1", "--bundle", bundleFile, "--to", dest)
			cmd.Env = append(cmd.Env, "KBUNDLE_TEST_RANKS_PER_NODE=1", "KBUNDLE_BCAST_CHUNK=65536")
			code, took, stderr := interrupt(t, cmd, filepath.Dir(dest), syscall.SIGTERM)
			if code == 0 {
				t.Errorf("exit 0 after SIGTERM\n%s", stderr)
			}
			check(t, -1, -1, took, stderr, filepath.Dir(dest))
		})
	}
}

func check(t *testing.T, code, want int, took time.Duration, stderr, dir string) {
	t.Helper()
	if want >= 0 && code != want {
		t.Errorf("exit %d, want %d\n%s", code, want, stderr)
	}
	if took > 15*time.Second {
		t.Errorf("took %s to stop", took)
	}
	time.Sleep(100 * time.Millisecond) // let a launcher's children go
	if left := temps(dir); len(left) != 0 {
		t.Errorf("left behind in %s: %v\n%s", dir, left, stderr)
	}
}

// TestKilledLeavesNothingAfterNextRun: what a SIGKILLed extract leaves is
// removed by the next extract into the same directory.
func TestKilledLeavesNothingAfterNextRun(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	file := packFastest(t, kb, bigTree(t, 60))
	parent := t.TempDir()
	dest := filepath.Join(parent, "dest")
	interrupt(t, exec.Command(kb, "extract", "--jobs", "1", file, dest), parent, syscall.SIGKILL)
	if len(temps(parent)) == 0 {
		t.Fatal("SIGKILL left nothing to clean: the test proves nothing")
	}
	if _, stderr, code := testutil.Run(t, nil, kb, "extract", file, dest); code != 0 {
		t.Fatalf("extract after a killed one: exit %d\n%s", code, stderr)
	}
	if left := temps(parent); len(left) != 0 {
		t.Errorf("stale temporaries not removed: %v", left)
	}
}
