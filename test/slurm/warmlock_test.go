package slurm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// standInSrun writes, in a new directory it returns, a one-node srun that
// drops its options and runs the command (as the 2026-12-01b review's
// reproducers do): kbundle-job.sbatch then runs without Slurm.
func standInSrun(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	script := "#!/bin/sh\nwhile [ $# -gt 0 ]; do case $1 in -N|-n|--ntasks-per-node|--mpi|--export) shift 2;; --*=*|-*) shift;; *) break;; esac; done\nexec \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "srun"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// runJob runs kbundle-job.sbatch with bash (no Slurm: srun is
// standInSrun's) and a time limit; it reports whether the job ended in it.
func runJob(t *testing.T, dir string, env []string, limit time.Duration) (out string, code int, ended bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", repoPath("scripts/slurm/kbundle-job.sbatch"), repoPath("test/slurm/testdata/tackapp.sh"))
	cmd.Env = append(testutil.CleanEnv("SLURM_CONF"), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	b, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(b), -1, false
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(b), code, true
}

// TestWarmLockPrivate is X3 of the 2026-12-01b review: kbundle-job.sbatch
// serialised warm-ups with flock on "$KBUNDLE_BUNDLE.lock", a 0644 file
// it never removed, without a time-out: another user who could read the
// file held the lock and the job waited until its time limit. The lock
// is now private (0600, the user's; an old readable one is replaced), is
// waited for KBUNDLE_WARM_LOCK_TIMEOUT seconds at most, and is removed
// by the job that warmed. Another real user (nobody) holds the old lock.
func TestWarmLockPrivate(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock (util-linux) not installed")
	}
	kb := testutil.Kbundle(t, testutil.NoMPI)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755) // t.TempDir's own parent: nobody enters it too
	cache := filepath.Join(dir, "cache")
	os.Mkdir(cache, 0o755)
	bundle := filepath.Join(cache, "cache.kbundle")
	lock := bundle + ".lock"
	env := []string{"KBUNDLE=" + kb, "KBUNDLE_BUNDLE=" + bundle, "KBUNDLE_PRESET=tack", "KBUNDLE_HARVEST=0", "KBUNDLE_WARM_IF_MISSING=1",
		"TMPDIR=" + dir, "SLURM_JOB_ID=5", "SLURM_JOB_NUM_NODES=1", "PATH=" + standInSrun(t) + ":" + os.Getenv("PATH")}

	t.Run("another user holds an old lock", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to run flock as another user (nobody)")
		}
		if err := os.WriteFile(lock, nil, 0o644); err != nil { // left by an earlier job, 0644
			t.Fatal(err)
		}
		holder := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--", "flock", "-s", lock, "sleep", "60")
		if err := holder.Start(); err != nil {
			t.Skipf("setpriv: %v", err)
		}
		defer func() { holder.Process.Kill(); holder.Wait() }()
		waitHeld(t, lock)
		out, code, ended := runJob(t, dir, env, 45*time.Second)
		if !ended {
			t.Fatalf("the job still waits for another user's lock after 45 s\n%s", out)
		}
		if code != 0 || !strings.Contains(out, "cache: warm") {
			t.Fatalf("exit %d; want 0 and a warm cache\n%s", code, out)
		}
		if _, err := os.Lstat(lock); !os.IsNotExist(err) {
			t.Errorf("the lock %s is left after the warm-up: %v", lock, err)
		}
	})

	t.Run("time-out", func(t *testing.T) {
		os.Remove(bundle)
		// A job of ours that warms for ever holds the (private) lock.
		holder := exec.Command("sh", "-c", "umask 077; exec flock \"$0\" sleep 60", lock)
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { holder.Process.Kill(); holder.Wait() }()
		waitHeld(t, lock)
		if fi, err := os.Stat(lock); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("lock %v, %v", fi, err)
		}
		start := time.Now()
		out, code, ended := runJob(t, dir, append(env, "KBUNDLE_WARM_LOCK_TIMEOUT=1"), 45*time.Second)
		if !ended || time.Since(start) > 30*time.Second {
			t.Fatalf("the job did not give up waiting after KBUNDLE_WARM_LOCK_TIMEOUT=1\n%s", out)
		}
		if code != 0 || !strings.Contains(out, "going on without warming") || !strings.Contains(out, "cache: cold") {
			t.Fatalf("exit %d; want 0, the time-out said and a cold run\n%s", code, out)
		}
	})
}

// waitHeld waits until someone holds a lock on path.
func waitHeld(t *testing.T, path string) {
	t.Helper()
	for i := 0; !held(path); i++ {
		if i == 100 {
			t.Fatalf("the lock holder did not take %s", path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// held reports whether someone holds a lock on path (a shared one too).
func held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
