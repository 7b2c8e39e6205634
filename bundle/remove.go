package bundle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// removeTree removes the directory tree dir, which kbundle extracted (its
// directories may be read-only: restored modes). It works on descriptors
// only: every directory is opened with O_NOFOLLOW relative to its parent,
// made writable with fchmod on that descriptor (never by path, so never
// outside the tree, whatever another user renames meanwhile), and emptied
// with unlinkat. A symlink is removed, never followed. Paths longer than
// PATH_MAX are no problem.
func removeTree(dir string) error {
	parent, err := unix.Open(filepath.Dir(dir), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("cannot remove the old tree %s: %w", dir, err)
	}
	defer unix.Close(parent)
	if err := removeAt(parent, filepath.Base(dir), 0); err != nil {
		return fmt.Errorf("cannot remove the old tree %s: %w", dir, err)
	}
	return nil
}

// maxRemoveDepth bounds the recursion (a bundle's names are at most 4096
// bytes, so at most 2048 levels).
const maxRemoveDepth = 4096

// A remover removes one tree through descriptors. It never descends into
// a mount point below the tree's top (another device, or the root of a
// mount: a bind mount, X2 of the 2026-12-01b review), and, with an owner
// (root's clean --user, H6), into a directory that owner does not own:
// root then removes nothing the user could not have removed. What it
// leaves, and every directory holding it, stays; left names it.
type remover struct {
	dev   uint64
	mnt   uint64 // the top's mount id (0: unknown)
	owner int64  // the owner every directory must have; -1: any
	left  []string
}

// newRemover is a remover for the tree whose top is open as fd.
func newRemover(fd int, owner int64) (*remover, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	r := &remover{dev: st.Dev, owner: owner}
	var sx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &sx) == nil && sx.Mask&unix.STATX_MNT_ID != 0 {
		r.mnt = sx.Mnt_id
	}
	return r, nil
}

// problem says why the directory open as fd (any descriptor, O_PATH
// too) must not be descended into, or returns "".
func (r *remover) problem(fd int) string {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err.Error()
	}
	var sx unix.Statx_t
	sxErr := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS|unix.STATX_MNT_ID, &sx)
	switch {
	case st.Dev != r.dev,
		sxErr == nil && sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0,
		sxErr == nil && r.mnt != 0 && sx.Mask&unix.STATX_MNT_ID != 0 && sx.Mnt_id != r.mnt:
		return "a mount point: kbundle never removes what another mount holds; unmount it first"
	case r.owner >= 0 && int64(st.Uid) != r.owner:
		return fmt.Sprintf("a directory of uid %d%s, not of uid %d%s: acting for a user, kbundle removes only what that user could", st.Uid, userName(st.Uid), r.owner, userName(uint32(r.owner)))
	}
	return ""
}

// leave records that rel was left, and why.
func (r *remover) leave(rel, why string) { r.left = append(r.left, Printable(rel)+" ("+why+")") }

// leftError is the error of a tree that could not be removed whole
// because of what the remover left: it matches ErrDestination.
func (r *remover) leftError() error {
	msg := fmt.Sprintf("left %d entr%s in it, and the directories holding them: %s", len(r.left), plural(len(r.left), "y", "ies"), strings.Join(r.left[:min(len(r.left), 5)], "; "))
	if len(r.left) > 5 {
		msg += fmt.Sprintf("; and %d more", len(r.left)-5)
	}
	return &Error{Err: ErrDestination, Msg: msg}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// removeAt removes name in the directory dirfd: a directory recursively,
// anything else with one unlinkat.
func removeAt(dirfd int, name string, depth int) error {
	r, err := newRemover(dirfd, -1)
	if err != nil {
		return err
	}
	if _, err := r.at(dirfd, name, name, depth); err != nil {
		return err
	}
	if len(r.left) > 0 {
		return r.leftError()
	}
	return nil
}

// at removes name (rel from the top) in the directory dirfd; kept: it
// left something there.
func (r *remover) at(dirfd int, name, rel string, depth int) (kept bool, err error) {
	err = unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if errors.Is(err, unix.EBUSY) {
		r.leave(rel, "a mount point: kbundle never removes what another mount holds; unmount it first")
		return true, nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return false, err
	}
	if depth > maxRemoveDepth {
		return false, unix.ELOOP
	}
	fd, why, err := r.openDir(dirfd, name)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if why != "" {
		r.leave(rel, why)
		return true, nil
	}
	defer unix.Close(fd)
	return r.opened(dirfd, name, fd, rel, depth)
}

// maxRemoveRounds bounds how often removeOpened lists a directory again
// because entries appeared in it while it was being emptied.
const maxRemoveRounds = 1000

// removeOpened removes the directory name in dirfd, open (and made
// writable) as fd: it empties fd and removes name, again and again while
// something still writes into it (an extraction stopping, S7), and only
// while name is still that directory (a directory swapped in meanwhile
// is left alone). It leaves mount points below it (an error matching
// ErrDestination names them).
func removeOpened(dirfd int, name string, fd, depth int) error {
	return removeOpenedAs(dirfd, name, fd, depth, -1)
}

// removeOpenedAs is removeOpened descending only into directories of
// owner (-1: any).
func removeOpenedAs(dirfd int, name string, fd, depth int, owner int64) error {
	r, err := newRemover(fd, owner)
	if err != nil {
		return err
	}
	kept, err := r.opened(dirfd, name, fd, ".", depth)
	if err == nil && kept {
		return r.leftError()
	}
	return err
}

func (r *remover) opened(dirfd int, name string, fd int, rel string, depth int) (kept bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	for round := 0; ; round++ {
		names, err := readNames(fd)
		if err != nil {
			return false, err
		}
		if depth == 0 {
			// The install record goes last, and stays with what was left:
			// a later clean (once the mount or the other user's directory
			// is gone) still knows the tree for kbundle's.
			if i := slices.Index(names, InstalledMarker); i >= 0 {
				names = append(slices.Delete(names, i, i+1), InstalledMarker)
			}
		}
		for _, n := range names {
			if kept && depth == 0 && n == InstalledMarker {
				break
			}
			sub := n
			if rel != "." {
				sub = rel + "/" + n
			}
			k, err := r.at(fd, n, sub, depth+1)
			if err != nil {
				return false, err
			}
			kept = kept || k
		}
		if kept {
			return true, nil // it cannot be emptied
		}
		var now unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
			return false, nil // gone, or no longer the directory we emptied
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) || round >= maxRemoveRounds {
			return false, err
		}
	}
}

// openDir opens the directory name in dirfd for reading, never through a
// symlink, and, unless r.problem refuses it (why), makes it writable by
// its owner (on the descriptor) when it is ours, so that its entries can
// be removed. A directory without read permission is first opened with
// O_PATH and made readable through /proc/self/fd, which names that very
// inode.
func (r *remover) openDir(dirfd int, name string) (fd int, why string, err error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err = unix.Openat(dirfd, name, flags, 0)
	if errors.Is(err, unix.EACCES) {
		pfd, perr := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if perr != nil {
			return -1, "", perr
		}
		if why = r.problem(pfd); why != "" {
			unix.Close(pfd)
			return -1, why, nil
		}
		var st unix.Stat_t
		if perr = unix.Fstat(pfd, &st); perr == nil && st.Uid == uint32(os.Geteuid()) {
			proc := "/proc/self/fd/" + strconv.Itoa(pfd)
			if perr = unix.Chmod(proc, 0o700); perr == nil {
				fd, err = unix.Open(proc, flags&^unix.O_NOFOLLOW, 0)
			}
		}
		unix.Close(pfd)
		if perr != nil {
			return -1, "", err
		}
	}
	if err != nil {
		return -1, "", err
	}
	if why = r.problem(fd); why != "" {
		unix.Close(fd)
		return -1, why, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && st.Uid == uint32(os.Geteuid()) && st.Mode&0o700 != 0o700 {
		unix.Fchmod(fd, 0o700)
	}
	return fd, "", nil
}

// readNames lists the directory open as fd.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(dup)
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	return f.Readdirnames(-1)
}
