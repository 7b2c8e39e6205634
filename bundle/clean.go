package bundle

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RemoveInstalled removes dest when, and only when, kbundle installed it:
// by the rule --force follows before it replaces a tree (checkDest), dest
// must be a directory of the caller's own, not a symlink nor a mount
// point, holding kbundle's InstalledMarker, and no live load may be
// installing it (Clean). It reports whether it removed anything: a dest
// that does not exist is nothing to do (false, nil). Any other directory,
// an empty one included, is refused with ErrDestination and left as it
// is. It is what job scripts, traps and epilogs call for the DEST that
// their own load printed.
func RemoveInstalled(dest string) (removed bool, err error) {
	res, err := Clean(dest, nil)
	return res.Removed, err
}

// CleanOptions tune Clean. The zero value removes a tree of the caller's.
type CleanOptions struct {
	// ForUser makes UID the owner the tree must have, instead of the
	// caller: root removing a user's trees (a Slurm epilog). The rules
	// are the same, with that user as the owner.
	ForUser bool
	UID     int
	// Keep, when set, is asked about a tree that passed every check,
	// just before it is removed, with its install record (nil when it
	// holds an older kbundle's marker, or a record this kbundle cannot
	// read): a non-empty answer leaves the tree as it is, and is the
	// reason (CleanResult.Kept).
	Keep func(rec *InstallRecord) string
}

// CleanResult says what Clean did.
type CleanResult struct {
	Removed bool   // dest was removed
	Kept    string // why Keep left it ("": it did not)
	Missing bool   // dest did not exist: nothing to do
}

// openParent opens the directory that holds dest and stats dest in it,
// not following a symlink. An error matching unix.ENOENT: either is
// missing.
func openParent(dest string) (pfd int, st unix.Stat_t, err error) {
	pfd, err = unix.Open(filepath.Dir(dest), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, &os.PathError{Op: "open", Path: filepath.Dir(dest), Err: err}
	}
	if err = unix.Fstatat(pfd, filepath.Base(dest), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		unix.Close(pfd)
		return -1, st, &os.PathError{Op: "lstat", Path: dest, Err: err}
	}
	return pfd, st, nil
}

// notOwner says that a DEST of uid is not owner's: the caller's, or, for
// a clean for a user, that user's.
func notOwner(uid, owner uint32, forUser bool) string {
	whose := fmt.Sprintf("you (uid %d)", owner)
	if forUser {
		whose = fmt.Sprintf("uid %d%s, whose trees you asked to remove", owner, userName(owner))
	}
	return fmt.Sprintf("it is owned by uid %d%s, not by %s%s", uid, userName(uid), whose, cleanKeeps)
}

// lockAndRecheck takes the lock of DEST (fd, name in pfd, st as Clean
// checked it) and checks again under it: missing when another clean
// removed it meanwhile, else refusal says why it stays ("": it goes):
// replaced, a mount point, a marker that is not kbundle's, or a load
// installing it now.
func lockAndRecheck(pfd, fd int, name, dest string, st *unix.Stat_t, owner uint32) (missing bool, refusal string, err error) {
	// Two cleans of one DEST at once (a clean on every task of a node:
	// Hydra's mpiexec --map-by binds and does not place, so `mpiexec
	// --map-by ppr:1:node kbundle clean` runs one a slot): one removes
	// it, holding its lock; the others wait, then find nothing to do.
	if !lockDir(fd) {
		return false, "another kbundle clean has held it for " + cleanWait.String() + cleanKeeps + "; run clean again once it ended", nil
	}
	var now unix.Stat_t
	switch err := unix.Fstatat(pfd, name, &now, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
		return true, "", nil
	case err != nil:
		return false, "", &os.PathError{Op: "lstat", Path: dest, Err: err}
	case now.Dev != st.Dev || now.Ino != st.Ino:
		return false, "it was replaced while kbundle clean looked at it" + cleanKeeps, nil
	}
	if mountPoint(pfd, fd, st) {
		return false, "it is a mount point, which kbundle never removes" + cleanKeeps, nil
	}
	if msg := markerProblem(fd, st); msg != "" {
		return false, strings.TrimSuffix(msg, forceKeeps) + cleanKeeps, nil
	}
	if live, named := liveTemp(pfd, name, owner); live {
		why := "a kbundle load of this host is installing it now"
		if !named {
			why = "a kbundle run of this host that does not say which destination it installs (an older kbundle) is installing beside it now"
		}
		return false, "it is in use: " + why + " (a locked temporary tree next to it)" + cleanKeeps + "; run clean again once the load ended", nil
	}
	return false, "", nil
}

// Clean removes dest when, and only when, all of these hold; otherwise it
// returns an error matching ErrDestination, saying which failed, and
// touches nothing:
//
//   - dest, looked up without following a symlink, is a directory, not a
//     mount point (another file system, or a bind mount);
//   - it is owned by the caller (or opt.UID, with opt.ForUser);
//   - it holds the InstalledMarker kbundle writes and is not writable by
//     group or others (the rule --force follows, docs/FORMAT.md, "Install
//     record");
//   - it is not in use by a live load: no temporary tree of that owner
//     beside it (a load staging a tree for dest, or still holding the tree
//     dest held before, as Stage and Install make them) is locked by a live
//     process and names dest, or names no destination (a kbundle before
//     this rule, which could be installing any);
//   - opt.Keep, if set, does not keep it.
//
// Removing, it never descends into a mount point below dest, and with
// opt.ForUser into a directory that user does not own: it leaves them
// (and the directories holding them) and returns an error matching
// ErrDestination that names them.
//
// The checks are made on descriptors: dest is opened once, relative to
// its parent, and the very directory checked is the one removed (through
// removeOpened). A dest that does not exist is nothing to do (Missing).
func Clean(dest string, opt *CleanOptions) (res CleanResult, err error) {
	if opt == nil {
		opt = &CleanOptions{}
	}
	dest, err = filepath.Abs(dest)
	if err != nil {
		return res, err
	}
	owner := uint32(os.Geteuid())
	if opt.ForUser {
		owner = uint32(opt.UID)
	}
	refuse := func(msg string) (CleanResult, error) {
		return res, &Error{File: dest, Err: ErrDestination, Msg: msg}
	}
	pfd, st, err := openParent(dest)
	if errors.Is(err, unix.ENOENT) {
		res.Missing = true
		return res, nil
	}
	if err != nil {
		return res, err
	}
	defer unix.Close(pfd)
	name := filepath.Base(dest)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return refuse("it is a symlink, which kbundle clean neither follows nor removes" + cleanKeeps + "; give the directory it points to")
	default:
		return refuse("it is not a directory" + cleanKeeps)
	}
	if st.Uid != owner {
		return refuse(notOwner(st.Uid, owner, opt.ForUser))
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return res, &os.PathError{Op: "open", Path: dest, Err: err}
	}
	defer unix.Close(fd)
	if !sameInode(fd, &st) {
		return refuse("it was replaced while kbundle clean looked at it" + cleanKeeps)
	}
	missing, refusal, err := lockAndRecheck(pfd, fd, name, dest, &st, owner)
	switch {
	case err != nil:
		return res, err
	case missing:
		res.Missing = true // the other clean removed it
		return res, nil
	case refusal != "":
		return refuse(refusal)
	}
	if opt.Keep != nil {
		rec, _ := readRecordAt(fd, dest)
		if res.Kept = opt.Keep(rec); res.Kept != "" {
			return res, nil
		}
	}
	// With ForUser, root descends only into the user's own directories
	// (H6): what another user's directory holds, the user could not
	// have removed, so root leaves it too.
	only := int64(-1)
	if opt.ForUser {
		only = int64(owner)
	}
	if err := removeOpenedAs(pfd, name, fd, 0, only); err != nil {
		return res, fmt.Errorf("cannot remove %s: %w", dest, err)
	}
	res.Removed = true
	return res, syncDir(filepath.Dir(dest))
}

// cleanWait bounds how long Clean waits for another clean of the same
// tree.
const cleanWait = 2 * time.Minute

// lockDir takes the directory open as fd for this clean (flock, released
// when fd is closed), waiting cleanWait at most for another's.
func lockDir(fd int) bool {
	for end := time.Now().Add(cleanWait); ; time.Sleep(20 * time.Millisecond) {
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// cleanKeeps ends Clean's refusals: it never deletes what kbundle did
// not install, or what a live load is installing.
const cleanKeeps = ", so kbundle clean leaves it as it is"

// mountPoint reports whether the directory open as fd (stat st), in the
// directory open as pfd, is a mount point: another device than its
// parent, or the root of a mount of the same device (a bind mount).
func mountPoint(pfd, fd int, st *unix.Stat_t) bool {
	var pst unix.Stat_t
	if unix.Fstat(pfd, &pst) == nil && pst.Dev != st.Dev {
		return true
	}
	var sx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS, &sx) == nil &&
		sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return true
	}
	return false
}

// readRecordAt reads and parses the install record of the directory open
// as fd (which passed markerProblem).
func readRecordAt(fd int, dest string) (*InstallRecord, error) {
	mfd, err := unix.Openat(fd, InstalledMarker, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &Error{File: dest, Err: ErrNoRecord, Msg: err.Error()}
	}
	f := os.NewFile(uintptr(mfd), filepath.Join(dest, InstalledMarker))
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxRecordLen+1))
	if err != nil {
		return nil, err
	}
	return ParseInstallRecord(b)
}

// liveTemp reports whether, in the directory open as pfd, a temporary
// tree of owner made on this host is locked by a live process and names
// the destination name in that directory (named), or names none (an
// older kbundle's: any destination). It looks at no more entries than
// RemoveStale does. A stale temporary (unlocked) does not count.
func liveTemp(pfd int, name string, owner uint32) (live, named bool) {
	dup, err := unix.Dup(pfd)
	if err != nil {
		return false, false
	}
	unix.CloseOnExec(dup)
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, false
	}
	unnamed := false
	read, candidates := 0, 0
	for read < maxStaleEntries && candidates < maxStaleCandidates {
		names, err := f.Readdirnames(256)
		read += len(names)
		for _, n := range names {
			if h, _, ok := parseTemp(n); !ok || h != host() {
				continue
			}
			candidates++
			var est unix.Stat_t
			if unix.Fstatat(pfd, n, &est, unix.AT_SYMLINK_NOFOLLOW) != nil || est.Uid != owner || est.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			dest, ok := liveMarker(pfd, n)
			switch {
			case !ok:
			case dest == "":
				unnamed = true
			case filepath.Base(dest) == name:
				return true, true
			}
		}
		if err != nil {
			break
		}
	}
	return unnamed, false
}

// liveMarker reads the tempMarker of the tree name in pfd: the
// destination it names, and whether it is kbundle's and locked by a live
// process (a shared lock is refused while the owner holds its exclusive
// one; a stale marker is locked and at once unlocked).
func liveMarker(pfd int, name string) (dest string, live bool) {
	dfd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, tempMarker, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	dest, ok := readMarker(fd, dfd)
	if !ok {
		return "", false
	}
	if unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) == nil {
		return "", false // nobody holds it: stale
	}
	return dest, true
}
