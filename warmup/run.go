package warmup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrNoCommand is returned by Run when no command was given.
var ErrNoCommand = errors.New("no command to run")

// ErrStart wraps the reason a command could not be started (not found,
// not executable). Callers map it to exit status 127 or 126 like env(1).
var ErrStart = errors.New("cannot start command")

// Options describe one warm-up run.
type Options struct {
	// Argv is the command and its arguments; Argv[0] is looked up in
	// PATH (of the child's environment) when it has no slash.
	Argv []string
	// Env is the child's complete environment (see preset.ChildEnv).
	Env []string
	// Dir is the cache directory to snapshot before and after.
	Dir string
	// Skip lists paths inside Dir left out of the snapshots.
	Skip []string
	// Stdin, Stdout and Stderr are the child's; nil means the null device.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Forward lists signals that are passed on to the child while it runs
	// instead of stopping the caller. Nil means SIGTERM, SIGHUP, SIGUSR1
	// and SIGUSR2. SIGINT and SIGQUIT are never forwarded (the terminal
	// already sends them to the whole foreground process group, child
	// included) but do not stop the caller while the child runs either:
	// the child decides, and its exit status is reported.
	Forward []os.Signal
}

// Result is the outcome of a warm-up run.
type Result struct {
	// Delta is what the run did to Dir.
	Delta *Delta
	// ExitCode is the command's exit status, or 128+n when signal n ended
	// it (the shell convention).
	ExitCode int
	// Signal is the signal that ended the command, or 0.
	Signal syscall.Signal
	// Duration is the command's wall-clock time.
	Duration time.Duration
}

// Failed reports whether the command exited non-zero or was killed.
func (r *Result) Failed() bool { return r.ExitCode != 0 || r.Signal != 0 }

// Run snapshots Dir, runs the command as one plain process with the given
// environment, waits for it (forwarding signals), snapshots Dir again and
// returns the delta and the command's exit status. An error means the
// command could not be run or Dir could not be read; a command that ran
// and failed is not an error (see Result.Failed).
func Run(ctx context.Context, o *Options) (*Result, error) {
	if len(o.Argv) == 0 || o.Argv[0] == "" {
		return nil, ErrNoCommand
	}
	before, err := TakeSnapshot(o.Dir, o.Skip...)
	if err != nil {
		return nil, err
	}
	path, err := lookPath(o.Argv[0], o.Env)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrStart, o.Argv[0], err)
	}
	cmd := exec.CommandContext(ctx, path, o.Argv[1:]...)
	cmd.Args[0] = o.Argv[0]
	cmd.Env = o.Env
	if cmd.Env == nil {
		cmd.Env = []string{} // never inherit by accident
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr

	fwd := o.Forward
	if fwd == nil {
		fwd = []os.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}
	}
	forward := map[os.Signal]bool{}
	for _, s := range fwd {
		forward[s] = true
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGINT, syscall.SIGQUIT}, fwd...)...)
	defer signal.Stop(sigs)

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrStart, o.Argv[0], err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if forward[s] {
					_ = cmd.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	waitErr := cmd.Wait()
	close(done)
	res := &Result{Duration: time.Since(start)}
	if waitErr != nil {
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) {
			return nil, fmt.Errorf("running %q: %w", o.Argv[0], waitErr)
		}
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = ws.Signal()
		res.ExitCode = 128 + int(res.Signal)
	} else {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}

	after, err := TakeSnapshot(o.Dir, o.Skip...)
	if err != nil {
		return res, err
	}
	res.Delta = Diff(before, after)
	return res, nil
}

// lookPath resolves name against PATH taken from env (the child's), not
// from this process, so a preset or user PATH applies. Like Go's
// exec.LookPath (ErrDot) it never runs what a relative or empty PATH entry
// finds, which depends on the current directory: such entries are
// skipped, and a name found only through one gives a relativeEntryError.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		fi, err := os.Stat(name)
		if err != nil {
			return "", err
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("%w: not an executable file", os.ErrPermission)
		}
		return name, nil
	}
	pathVar := os.Getenv("PATH")
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			pathVar = v
			break
		}
	}
	var denied error
	var relative *relativeEntryError
	for _, dir := range filepath.SplitList(pathVar) {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			if err == nil && !fi.IsDir() && filepath.IsAbs(dir) {
				denied = fmt.Errorf("%w: %s is not executable", os.ErrPermission, p)
			}
			continue
		}
		if !filepath.IsAbs(dir) {
			if relative == nil {
				relative = &relativeEntryError{name: name, entry: dir}
			}
			continue
		}
		return p, nil
	}
	switch {
	case denied != nil:
		return "", denied
	case relative != nil:
		return "", relative
	}
	return "", exec.ErrNotFound
}

// relativeEntryError says that a command was found only through a relative
// or empty PATH entry, which lookPath skips. It matches exec.ErrDot and
// exec.ErrNotFound (exit 127 for warm).
type relativeEntryError struct{ name, entry string }

func (e *relativeEntryError) Error() string {
	where := fmt.Sprintf("the relative PATH entry %q", e.entry)
	if e.entry == "" {
		where = "the empty PATH entry (the current directory)"
	}
	p := filepath.Join(e.entry, e.name)
	if !strings.HasPrefix(p, "../") {
		p = "./" + p
	}
	return fmt.Sprintf("%s was found only through %s; give its path (%s) or put an absolute directory in PATH", e.name, where, p)
}

func (e *relativeEntryError) Unwrap() []error { return []error{exec.ErrDot, exec.ErrNotFound} }

// SignalName returns the conventional name of s ("SIGKILL"), or
// "signal N" for one without a name here.
func SignalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT", syscall.SIGALRM: "SIGALRM", syscall.SIGBUS: "SIGBUS",
	syscall.SIGFPE: "SIGFPE", syscall.SIGHUP: "SIGHUP", syscall.SIGILL: "SIGILL",
	syscall.SIGINT: "SIGINT", syscall.SIGKILL: "SIGKILL", syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGQUIT: "SIGQUIT", syscall.SIGSEGV: "SIGSEGV", syscall.SIGTERM: "SIGTERM",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}
