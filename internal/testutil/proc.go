package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Processes returns the running processes (on this machine, in any
// namespace) whose program is exe: the ranks of a job that runs a test
// build (Kbundle), which no other process runs.
func Processes(exe string) []int {
	if p, err := filepath.EvalSymlinks(exe); err == nil {
		exe = p
	}
	var out []int
	ps, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range ps {
		if got, err := os.Readlink(p + "/exe"); err == nil && got == exe {
			pid, _ := strconv.Atoi(filepath.Base(p))
			out = append(out, pid)
		}
	}
	return out
}

// setProcessGroup makes cmd the leader of a new process group and kills
// the whole group when its context ends, so a hung launcher takes its
// ranks with it.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
