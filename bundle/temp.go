package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Temporary files and trees are named
//
//	.<base>.kbundle-tmp-<host>-<pid>-<random>
//
// beside what they become (<base>), so that what a killed process leaves
// can be told apart from a live one's: RemoveStale removes those of this
// host whose process is gone, and RemoveTemps, called from a signal
// handler, removes this process's own.
const tempTag = ".kbundle-tmp-"

var (
	hostOnce sync.Once
	hostName string

	tempsMu sync.Mutex
	temps   = map[string]bool{} // path → is a directory tree
)

// host returns this machine's host name with '-' and '/' replaced, so it
// parses back out of a temp name.
func host() string {
	hostOnce.Do(func() {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "localhost"
		}
		hostName = strings.Map(func(r rune) rune {
			if r == '-' || r == '/' || r == '.' {
				return '_'
			}
			return r
		}, h)
	})
	return hostName
}

// tempPattern is the os.MkdirTemp/CreateTemp pattern for a temporary
// sibling of base.
func tempPattern(base string) string {
	return "." + base + tempTag + host() + "-" + strconv.Itoa(os.Getpid()) + "-*"
}

func track(path string, dir bool) {
	tempsMu.Lock()
	temps[path] = dir
	tempsMu.Unlock()
}

func untrack(path string) {
	tempsMu.Lock()
	delete(temps, path)
	tempsMu.Unlock()
}

// RemoveTemps removes every temporary file and tree that this process's
// unfinished Pack, Extract and Stage calls created, and returns the paths
// removed. It is meant for a signal handler, just before the process exits
// (the calls themselves remove their temporaries when they fail or are
// cancelled).
func RemoveTemps() []string {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	var done []string
	for p, dir := range temps {
		if dir {
			removeTree(p)
		} else {
			os.Remove(p)
		}
		done = append(done, p)
		delete(temps, p)
	}
	return done
}

// parseTemp returns the host and pid in a temporary name made by
// tempPattern, and whether it is one.
func parseTemp(name string) (h string, pid int, ok bool) {
	if !strings.HasPrefix(name, ".") {
		return "", 0, false
	}
	i := strings.LastIndex(name, tempTag)
	if i < 0 {
		return "", 0, false
	}
	parts := strings.Split(name[i+len(tempTag):], "-")
	if len(parts) < 3 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	return strings.Join(parts[:len(parts)-2], "-"), pid, true
}

// alive reports whether process pid exists on this host and is not a
// zombie: a rank killed with its job is a zombie until its parent (often
// PID 1, slow to reap) collects it, and its temporaries are stale already.
func alive(pid int) bool {
	if err := unix.Kill(pid, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) // no /proc: trust kill
	}
	// "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
	if i := bytes.LastIndex(b, []byte(") ")); i >= 0 && i+2 < len(b) {
		if st := b[i+2]; st == 'Z' || st == 'X' {
			return false
		}
	}
	return true
}

// RemoveStale removes, in directory dir, the temporary files and trees left
// by kbundle processes that were killed (SIGKILL, a node failure) before
// they could clean up: those named for this host whose process no longer
// exists and that belong to the current user. Another live process's
// temporaries, other hosts' (dir may be shared) and other users' are never
// touched. It returns the paths removed; a dir that does not exist is not
// an error.
func RemoveStale(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	me := uint32(os.Getuid())
	var removed []string
	var errs []error
	for _, e := range ents {
		h, pid, ok := parseTemp(e.Name())
		if !ok || h != host() || pid == os.Getpid() || alive(pid) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != me {
			continue
		}
		if fi.IsDir() {
			err = removeTree(p)
		} else {
			err = os.Remove(p)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cannot remove stale %s: %w", p, err))
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}
