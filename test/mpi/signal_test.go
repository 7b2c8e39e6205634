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
	"github.com/kbundle/kbundle/warmup"
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
	return interruptWith(t, cmd, watch, func() { cmd.Process.Signal(sig) })
}

// interruptWith is interrupt with the signalling done by send.
func interruptWith(t *testing.T, cmd *exec.Cmd, watch string, send func()) (int, time.Duration, string) {
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
	send()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("%v still running 30 s after the signal", cmd.Args)
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
// extract, warm --pack and load (under both MPIs, sent to every rank as
// scancel does) end the command within a bounded time with 128+N and
// leave no temporary file or tree; so does SIGTERM sent to the launcher.
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
		kbm := testutil.Kbundle(t, v)
		load := func(t *testing.T) (*exec.Cmd, string) {
			dest := filepath.Join(t.TempDir(), "dest")
			cmd := testutil.MPICommand(context.Background(), v, 2, kbm, "load", "--jobs", "1", "--bundle", bundleFile, "--to", dest)
			cmd.Env = append(cmd.Env, "KBUNDLE_TEST_RANKS_PER_NODE=1", "KBUNDLE_BCAST_CHUNK=65536")
			return cmd, filepath.Dir(dest)
		}
		// What scancel and a Slurm time limit do: every task gets the
		// signal. Every rank exits 128+N, and so does the launcher.
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
			t.Run("load/"+string(v)+"/ranks/"+sig.String(), func(t *testing.T) {
				cmd, dir := load(t)
				code, took, stderr := interruptWith(t, cmd, dir, func() {
					pids := testutil.Processes(kbm) // this test's build: this job's ranks
					if len(pids) != 2 {
						t.Errorf("found %d kbundle ranks under the launcher, want 2", len(pids))
					}
					for _, pid := range pids {
						syscall.Kill(pid, sig)
					}
				})
				name := warmup.SignalName(sig)
				if !strings.Contains(stderr, "interrupted by "+name) || strings.Contains(stderr, "hint:") {
					t.Errorf("the message should say the load was interrupted by %s, with no hint\n%s", name, stderr)
				}
				// Rank 0 says at once that it stops (U49), and speaks for
				// rank 1, which prints no line of its own (U46).
				if n := strings.Count(stderr, "kbundle: interrupted by "+name+": stopping; what this run wrote is removed\n"); n != 1 {
					t.Errorf("%d lines say the load is stopping, want 1 (rank 0's)\n%s", n, stderr)
				}
				if n := strings.Count(stderr, "; stopped\n"); n > 1 {
					t.Errorf("%d ranks said they stopped, want rank 0 at most\n%s", n, stderr)
				}
				check(t, code, 128+int(sig), took, stderr, dir)
			})
		}
		// A signal to the launcher (Ctrl-C, a batch script's shell
		// killed): it forwards it. MPICH's mpiexec.hydra itself then
		// sometimes exits 0 although every rank exited 143 (it does so
		// with ranks that are plain shell scripts too), so its status is
		// not kbundle's to test; Open MPI's mpirun fails reliably.
		t.Run("load/"+string(v)+"/launcher", func(t *testing.T) {
			cmd, dir := load(t)
			code, took, stderr := interrupt(t, cmd, dir, syscall.SIGTERM)
			if code == 0 && v == testutil.OpenMPI {
				t.Errorf("exit 0 after SIGTERM\n%s", stderr)
			}
			check(t, -1, -1, took, stderr, dir)
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
