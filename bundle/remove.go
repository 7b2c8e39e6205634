package bundle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

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

// removeAt removes name in the directory dirfd: a directory recursively,
// anything else with one unlinkat.
func removeAt(dirfd int, name string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	if depth > maxRemoveDepth {
		return unix.ELOOP
	}
	fd, err := openDirNoFollow(dirfd, name)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	defer unix.Close(fd)
	return removeOpened(dirfd, name, fd, depth)
}

// maxRemoveRounds bounds how often removeOpened lists a directory again
// because entries appeared in it while it was being emptied.
const maxRemoveRounds = 1000

// removeOpened removes the directory name in dirfd, open (and made
// writable) as fd: it empties fd and removes name, again and again while
// something still writes into it (an extraction stopping, S7), and only
// while name is still that directory (a directory swapped in meanwhile
// is left alone).
func removeOpened(dirfd int, name string, fd, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	for round := 0; ; round++ {
		names, err := readNames(fd)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := removeAt(fd, n, depth+1); err != nil {
				return err
			}
		}
		var now unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
			return nil // gone, or no longer the directory we emptied
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) || round >= maxRemoveRounds {
			return err
		}
	}
}

// openDirNoFollow opens the directory name in dirfd for reading, never
// through a symlink, and makes it writable by its owner (on the
// descriptor) when it is ours, so that its entries can be removed. A
// directory without read permission is first opened with O_PATH and
// made readable through /proc/self/fd, which names that very inode.
func openDirNoFollow(dirfd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if errors.Is(err, unix.EACCES) {
		pfd, perr := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if perr != nil {
			return -1, perr
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
			return -1, err
		}
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && st.Uid == uint32(os.Geteuid()) && st.Mode&0o700 != 0o700 {
		unix.Fchmod(fd, 0o700)
	}
	return fd, nil
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
