package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Temporary files and trees are named
//
//	.kbundle-tmp-<host>-<pid>-<random>
//
// in the directory of what they become. The name carries neither DEST's
// nor the bundle's name: it announces nothing another user could act on
// (S4) and stays short whatever DEST is called (S12). Host and pid are for
// people and for telling this host's temporaries from another's in a
// shared directory; they decide nothing about liveness.
//
// What proves a temporary is kbundle's and that its process is gone is an
// flock(2), which the kernel drops when the process dies, whatever its PID
// namespace (S5):
//
//   - a tree holds, at its top, the file tempMarker (written with O_EXCL
//     when the tree is made, before anything is extracted into it, so a
//     bundle cannot supply it), locked for as long as the tree is a
//     temporary: it is unlinked just before the tree is renamed into place,
//     so an installed tree never carries it;
//   - a file (Pack's output) is locked itself, on the descriptor Pack
//     writes through, until it is renamed into place.
//
// RemoveStale removes only what carries that proof, unlocked, and only in a
// directory where nobody else can rename entries (S1); RemoveTemps, called
// from a signal handler or a timeout, removes this process's own.
const tempTag = ".kbundle-tmp-"

// newTag names a temporary tree while it is being made, before its marker
// is complete (newTempDir): what a process killed just then leaves is an
// empty directory, which RemoveStale removes once it is older than
// unfinishedAge (no live process takes that long to make a marker).
const newTag = ".kbundle-new-"

// unfinishedAge is how old an unfinished tree (newTag) must be before
// RemoveStale takes it for a killed process's (a variable for tests).
var unfinishedAge = time.Minute

// tempMarker is the lock file at the top of a temporary tree.
const tempMarker = ".kbundle-temporary"

// tempMarkerText is how tempMarker's content starts: RemoveStale also
// checks it. A line "dest PATH\n" follows, naming the destination the tree
// is for (or held before a replacing install), so that Clean can tell
// that a live load is installing that very DEST; the tree is private
// (0700), so the name is announced to no one else.
const tempMarkerText = "kbundle: temporary tree of an unfinished extraction, locked while its process lives; kbundle removes it once unlocked\n"

// tempDestTag opens tempMarker's second line.
const tempDestTag = "dest "

// maxTempMarker bounds tempMarker's size: its text and a destination.
const maxTempMarker = len(tempMarkerText) + len(tempDestTag) + 4096 + 1

// tempMarkerFor is tempMarker's content for a tree of dest ("": none
// named, as older kbundles wrote it).
func tempMarkerFor(dest string) string {
	if dest == "" || strings.ContainsRune(dest, '\n') || len(dest) > 4096 {
		return tempMarkerText
	}
	return tempMarkerText + tempDestTag + dest + "\n"
}

// markerDest is the destination a tempMarker's content b names, and
// whether b is kbundle's (tempMarkerFor's output).
func markerDest(b []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(b, []byte(tempMarkerText))
	if !ok {
		return "", false
	}
	if len(rest) == 0 {
		return "", true
	}
	d, ok := bytes.CutPrefix(rest, []byte(tempDestTag))
	if !ok || len(d) < 2 || d[len(d)-1] != '\n' || bytes.IndexByte(d[:len(d)-1], '\n') >= 0 {
		return "", false
	}
	return string(d[:len(d)-1]), true
}

// ErrExiting: RemoveTemps was called (a signal or a timeout): this process
// is ending, and Stage, Install and Pack refuse to start or install a
// temporary that nothing would remove.
var ErrExiting = errors.New("kbundle: the process is exiting (its temporaries were removed)")

// A tempEntry is one of this process's temporaries.
type tempEntry struct {
	dir  bool
	dest string   // a tree's destination, named in its marker
	lock *os.File // a tree's locked tempMarker (nil for a file: its writer holds the lock)
	// For a tree being extracted into: cancel stops the extraction, and
	// stopped is closed when its workers have returned.
	cancel  context.CancelFunc
	stopped chan struct{}
}

var (
	hostOnce sync.Once
	hostName string

	// tempsMu guards temps and closing, and is held across every rename
	// of a tracked temporary, so that RemoveTemps never races one (S7).
	tempsMu sync.Mutex
	temps   = map[string]*tempEntry{}
	closing bool
	// claims are the destinations ClaimDir made, empty, to hold their
	// names; RemoveTemps removes those still empty.
	claims = map[string]bool{}
)

// ClaimDir makes dir, empty and private (0700), so that nobody else can
// make it before a tree is installed over it (Staged.Install replaces an
// empty directory of ours). ReleaseClaim removes it again if nothing was
// installed; RemoveTemps (a signal, a timeout) does too, so that a load
// ended that way leaves neither a temporary nor an empty DEST (S4, S7).
// The error is os.Mkdir's, or ErrExiting.
func ClaimDir(dir string) error {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	if closing {
		return ErrExiting
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	claims[dir] = true
	return nil
}

// ReleaseClaim forgets a directory ClaimDir made, removing it if it is
// still empty (nothing was installed over it).
func ReleaseClaim(dir string) {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	if claims[dir] {
		unix.Rmdir(dir)
		delete(claims, dir)
	}
}

// host returns this machine's host name with '-', '/' and '.' replaced, so
// it parses back out of a temp name.
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

// tempPattern is the os.MkdirTemp/CreateTemp pattern of this process's
// temporaries: about 100 bytes at most (a 64-byte host name), whatever
// DEST is called (S12).
func tempPattern() string {
	return tempTag + host() + "-" + strconv.Itoa(os.Getpid()) + "-*"
}

// newTempDir makes, locks and tracks a temporary tree in parent. The
// returned context, derived from ctx, is cancelled by RemoveTemps, which
// then waits (a little) for done to be called before it removes the tree.
func newTempDir(ctx context.Context, parent string) (path string, _ context.Context, done func(), err error) {
	return newTempDirFor(ctx, parent, "")
}

// newTempDirFor is newTempDir for a tree to be installed at dest, which
// its marker names (tempMarkerFor).
func newTempDirFor(ctx context.Context, parent, dest string) (path string, _ context.Context, done func(), err error) {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	if closing {
		return "", nil, nil, ErrExiting
	}
	// The tree is born under a name RemoveStale treats as unfinished
	// (newTag) and takes its temporary name only once its marker is
	// complete and locked: a tree named tempTag always carries its proof,
	// whenever the process is killed.
	born, err := os.MkdirTemp(parent, newTag+host()+"-"+strconv.Itoa(os.Getpid())+"-*")
	if err != nil {
		return "", nil, nil, err
	}
	lock, err := lockTree(born, dest)
	if err == nil {
		path = filepath.Join(parent, tempTag+strings.TrimPrefix(filepath.Base(born), newTag))
		if err = renameNoReplace(born, path); err != nil {
			lock.Close()
			os.Remove(filepath.Join(born, tempMarker))
		}
	}
	if err != nil {
		os.Remove(born)
		return "", nil, nil, err
	}
	e := &tempEntry{dir: true, dest: dest, lock: lock, stopped: make(chan struct{})}
	var once sync.Once
	done = func() { once.Do(func() { close(e.stopped) }) }
	ctx, e.cancel = context.WithCancel(ctx)
	temps[path] = e
	return path, ctx, done, nil
}

// renameNoReplace renames old to new, failing if new exists (where the
// kernel or file system cannot tell, a plain rename: new is a fresh
// random name).
func renameNoReplace(old, new string) error {
	err := unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, new, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		return os.Rename(old, new)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: old, New: new, Err: err}
	}
	return nil
}

// newTempFile creates, locks and tracks a temporary file in dir. The lock
// lives as long as the returned file stays open.
func newTempFile(dir string) (*os.File, error) {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	if closing {
		return nil, ErrExiting
	}
	f, err := os.CreateTemp(dir, tempPattern())
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	temps[f.Name()] = &tempEntry{}
	return f, nil
}

func flock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) }); err != nil {
		return err
	}
	if ferr != nil {
		return &os.PathError{Op: "flock", Path: f.Name(), Err: ferr}
	}
	return nil
}

// lockTree writes tempMarker, naming dest, at the top of the tree dir
// (ours, just made or just taken back) and returns it, locked.
func lockTree(dir, dest string) (*os.File, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, tempMarker, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: filepath.Join(dir, tempMarker), Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir, tempMarker))
	if err = flock(f); err == nil {
		_, err = f.WriteString(tempMarkerFor(dest))
	}
	if err != nil {
		f.Close()
		unix.Unlinkat(dfd, tempMarker, 0)
		return nil, err
	}
	return f, nil
}

// unlockTree unlinks a tracked tree's marker (before the tree is renamed
// to a name that is not a temporary) and drops its lock. The caller holds
// tempsMu.
func unlockTree(path string, e *tempEntry) {
	if e == nil || e.lock == nil {
		return
	}
	os.Remove(filepath.Join(path, tempMarker))
	e.lock.Close()
	e.lock = nil
}

// relockTree gives a tracked tree (new, or renamed back after a failed
// install) its marker again. A failure only costs the proof: if this
// process is killed, RemoveStale will leave the tree alone. The caller
// holds tempsMu.
func relockTree(path string, e *tempEntry) {
	if e.lock == nil {
		e.lock, _ = lockTree(path, e.dest)
	}
}

// trackTree tracks (and locks) a tree this process renamed to a
// temporary's name, from dest or for it. The caller holds tempsMu.
func trackTree(path, dest string) {
	e := &tempEntry{dir: true, dest: dest}
	relockTree(path, e)
	temps[path] = e
}

// forget stops tracking path and drops its lock. The caller holds tempsMu.
func forget(path string) {
	if e := temps[path]; e != nil {
		unlockTree(path, e)
		if e.cancel != nil {
			e.cancel()
		}
		delete(temps, path)
	}
}

// renameTemp renames the tracked temporary file tmp to dst and forgets it,
// under tempsMu: after RemoveTemps it fails with ErrExiting.
func renameTemp(tmp, dst string) error {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	if closing || temps[tmp] == nil {
		return fmt.Errorf("cannot write %s: %w", dst, ErrExiting)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	forget(tmp)
	return nil
}

// untrack forgets path, if it is tracked.
func untrack(path string) {
	tempsMu.Lock()
	forget(path)
	tempsMu.Unlock()
}

// dropTemp removes the tracked temporary path and forgets it; one that
// RemoveTemps already removed is no error.
func dropTemp(path string) error {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	e := temps[path]
	if e == nil {
		return nil
	}
	var err error
	if e.dir {
		err = removeTree(path)
	} else if err = os.Remove(path); errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	forget(path)
	return err
}

// removeTempsWait bounds how long RemoveTemps waits for the extractions it
// cancelled to stop writing.
const removeTempsWait = 2 * time.Second

// RemoveTemps removes every temporary file and tree that this process's
// unfinished Pack, Extract and Stage calls created (and the trees a
// replacing Install moved aside), and returns the paths removed. It is
// meant for a signal handler or a timeout, just before the process exits
// (the calls themselves remove their temporaries when they fail or are
// cancelled): it cancels the running extractions and waits up to
// removeTempsWait for their workers, and from then on Stage, Install and
// Pack fail with ErrExiting, so that after it DEST is either what it was
// or the whole new tree, and no temporary is left (S7).
func RemoveTemps() []string { return RemoveTempsWithin(removeTempsWait) }

// RemoveTempsWithin is RemoveTemps waiting at most wait for the
// extractions' workers: for a caller whose extractions were cancelled
// long before (a signal's grace has passed), so that the process ends
// before a batch system's kill (Slurm's KillWait) comes.
func RemoveTempsWithin(wait time.Duration) []string {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	closing = true
	for _, e := range temps {
		if e.cancel != nil {
			e.cancel()
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	late := false
	for _, e := range temps {
		if e.stopped == nil || late {
			continue
		}
		select {
		case <-e.stopped:
		case <-t.C:
			late = true
		}
	}
	var done []string
	for p, e := range temps {
		if e.dir {
			removeTree(p)
		} else {
			os.Remove(p)
		}
		done = append(done, p)
		forget(p)
	}
	for d := range claims {
		if unix.Rmdir(d) == nil { // only an empty one: nothing was installed over it
			done = append(done, d)
		}
		delete(claims, d)
	}
	return done
}

// parseTemp returns the host and pid in a temporary name made by
// tempPattern, and whether it is one.
func parseTemp(name string) (h string, pid int, ok bool) {
	rest, ok := strings.CutPrefix(name, tempTag)
	if !ok {
		if rest, ok = strings.CutPrefix(name, newTag); !ok {
			return "", 0, false
		}
	}
	parts := strings.Split(rest, "-")
	if len(parts) < 3 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	return strings.Join(parts[:len(parts)-2], "-"), pid, true
}

// Bounds on one RemoveStale run, so that other users' entries cannot make
// it long (V2): the directory entries read, and the names that look like
// this host's temporaries examined further (one fstatat each).
const (
	maxStaleEntries    = 1 << 16
	maxStaleCandidates = 1 << 10
)

// staleProbes counts the entries whose proof RemoveStale examined (opened
// and tried to lock): a test hook.
var staleProbes atomic.Int64

// RemoveStale removes, in directory dir, the temporaries that killed
// kbundle processes of the current user left (SIGKILL, a node failure,
// mpirun killing its ranks), and returns the paths it removed. It removes
// an entry only when all of these hold:
//
//   - dir is owned by the caller or root, and no one else can rename
//     entries in it: neither group nor others may write it, unless it is
//     sticky (as /tmp is). KBUNDLE_TRUSTED_GROUPS does not count here. In
//     any other directory it removes nothing and returns an error matching
//     ErrUntrusted;
//   - the entry's name is .kbundle-tmp-<this host>-<pid>-<random>;
//   - the entry, looked up without following a symlink, is owned by the
//     caller and is either a regular file (with one link, or more: a
//     layer published by link(2) before its writer was killed; only this
//     name goes, the data stays under the others), or a directory
//     holding at its top a regular, single-link file .kbundle-temporary
//     of the caller with kbundle's text;
//   - that file (or the file itself) is not flock-ed: the process that
//     made it, in whatever PID namespace, is gone.
//
// A live process's temporaries, other hosts' (dir may be shared), other
// users', trees without the lock file (such as those of kbundle versions
// before it) and everything else are never touched; neither is anything
// renamed into a temporary's name, unless it is a stale temporary. One run
// reads at most 65536 entries of dir and examines at most 1024 names that
// look like this host's temporaries; the next run gets the rest. A dir
// that does not exist is not an error.
func RemoveStale(dir string) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir) // owns fd
	defer f.Close()
	me := uint32(os.Geteuid())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	if (st.Uid != me && st.Uid != 0) || (st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0) {
		return nil, &Error{File: dir, Err: ErrUntrusted, Msg: fmt.Sprintf("not removing stale temporaries: another user can rename entries here (mode %04o, owner uid %d)",
			st.Mode&0o7777, st.Uid)}
	}
	var removed []string
	var errs []error
	read, candidates := 0, 0
	for read < maxStaleEntries && candidates < maxStaleCandidates {
		names, err := f.Readdirnames(256)
		read += len(names)
		for _, n := range names {
			if h, _, ok := parseTemp(n); !ok || h != host() {
				continue
			}
			if candidates++; candidates > maxStaleCandidates {
				break
			}
			var est unix.Stat_t
			if unix.Fstatat(fd, n, &est, unix.AT_SYMLINK_NOFOLLOW) != nil || est.Uid != me {
				continue // others' entries cost one fstatat, no more
			}
			ok, rerr := removeStaleAt(fd, n, &est)
			p := filepath.Join(dir, n)
			if rerr != nil {
				errs = append(errs, fmt.Errorf("cannot remove stale %s: %w", p, rerr))
			} else if ok {
				removed = append(removed, p)
			}
		}
		if err != nil {
			if err != io.EOF {
				errs = append(errs, err)
			}
			break
		}
	}
	return removed, errors.Join(errs...)
}

// removeStaleAt removes name in dirfd (lstat-ed as st, ours) if it is a
// stale temporary, and says whether it did.
func removeStaleAt(dirfd int, name string, st *unix.Stat_t) (bool, error) {
	staleProbes.Add(1)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		// Any number of links: a layer published by link(2) shares its
		// temporary's inode until the temporary's name is removed, and a
		// process killed in between leaves that name; removing a name of
		// a file with other names loses no data.
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, nil
		}
		defer unix.Close(fd)
		if !sameInode(fd, st) || unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
			return false, nil // replaced meanwhile, or its process lives
		}
		var now unix.Stat_t
		if unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW) != nil || now.Dev != st.Dev || now.Ino != st.Ino {
			return false, nil
		}
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return false, err
		}
		return true, nil
	case unix.S_IFDIR:
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, nil
		}
		defer unix.Close(fd)
		if !sameInode(fd, st) {
			return false, nil
		}
		if strings.HasPrefix(name, newTag) {
			if time.Since(time.Unix(st.Ctim.Unix())) < unfinishedAge {
				return false, nil // perhaps a live process still making it
			}
			return removeUnfinished(dirfd, name, fd)
		}
		mfd := lockMarker(fd)
		if mfd < 0 {
			return false, nil
		}
		// The marker stays locked (by us now, so a second cleaner keeps
		// off) while the tree is removed through fd: the very directory
		// whose marker was checked.
		defer unix.Close(mfd)
		if err := removeOpened(dirfd, name, fd, 0); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// removeUnfinished removes the unfinished tree name (newTag) in dirfd,
// open as fd, that a process killed while it made it left: an empty
// directory, or one holding only its unlocked marker. The rmdir itself
// fails on anything else, so nothing but an empty directory can go.
func removeUnfinished(dirfd int, name string, fd int) (bool, error) {
	names, err := readNames(fd)
	if err != nil || len(names) > 1 || len(names) == 1 && names[0] != tempMarker {
		return false, nil
	}
	if len(names) == 1 {
		mfd, err := unix.Openat(fd, tempMarker, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, nil
		}
		defer unix.Close(mfd)
		var st, dst unix.Stat_t
		if unix.Fstat(mfd, &st) != nil || unix.Fstat(fd, &dst) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG ||
			st.Nlink != 1 || st.Uid != dst.Uid || st.Size > int64(maxTempMarker) ||
			unix.Flock(mfd, unix.LOCK_EX|unix.LOCK_NB) != nil || unix.Unlinkat(fd, tempMarker, 0) != nil {
			return false, nil
		}
	}
	if unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR) != nil {
		return false, nil // not empty after all: left as it is
	}
	return true, nil
}

// lockMarker returns the tempMarker of the directory open as dfd, locked,
// if it is kbundle's (regular, one link, owned by the directory's owner,
// with tempMarkerText) and no live process holds it; or -1.
func lockMarker(dfd int) int {
	fd, err := unix.Openat(dfd, tempMarker, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	if _, ok := readMarker(fd, dfd); !ok || unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		unix.Close(fd)
		return -1
	}
	return fd
}

// readMarker reads the tempMarker open as fd in the directory open as
// dfd: the destination it names, and whether it is kbundle's (regular,
// one link, owned by the directory's owner, tempMarkerFor's text).
func readMarker(fd, dfd int) (dest string, ok bool) {
	var st, dst unix.Stat_t
	if unix.Fstat(fd, &st) != nil || unix.Fstat(dfd, &dst) != nil ||
		st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Uid != dst.Uid ||
		st.Size < int64(len(tempMarkerText)) || st.Size > int64(maxTempMarker) {
		return "", false
	}
	b := make([]byte, st.Size+1)
	n, _ := unix.Pread(fd, b, 0)
	if int64(n) != st.Size {
		return "", false
	}
	return markerDest(b[:n])
}

func sameInode(fd int, st *unix.Stat_t) bool {
	var now unix.Stat_t
	return unix.Fstat(fd, &now) == nil && now.Dev == st.Dev && now.Ino == st.Ino
}
