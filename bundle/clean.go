package bundle

import (
	"errors"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// RemoveInstalled removes dest when, and only when, kbundle installed it:
// by the rule --force follows before it replaces a tree (checkDest), dest
// must be a directory of the caller's own, not a symlink nor a mount
// point, holding kbundle's InstalledMarker. It reports whether it removed
// anything: a dest that does not exist is nothing to do (false, nil). Any
// other directory, an empty one included, is refused with ErrDestination
// and left as it is. It is what job scripts, traps and epilogs call for
// the DEST that their own load printed.
func RemoveInstalled(dest string) (removed bool, err error) {
	dest, err = filepath.Abs(dest)
	if err != nil {
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dest, &st); errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	replace, err := checkDest(dest, true)
	var e *Error
	if errors.As(err, &e) && strings.HasSuffix(e.Msg, forceKeeps) {
		e.Msg = strings.TrimSuffix(e.Msg, forceKeeps) + cleanKeeps
	}
	if err != nil {
		return false, err
	}
	if !replace {
		return false, &Error{File: dest, Err: ErrDestination, Msg: "kbundle did not install this directory (it holds no " + InstalledMarker + ")" + cleanKeeps}
	}
	if err := removeTree(dest); err != nil {
		return false, err
	}
	return true, syncDir(filepath.Dir(dest))
}

// cleanKeeps ends RemoveInstalled's refusals: it never deletes what
// kbundle did not install.
const cleanKeeps = ", so kbundle clean leaves it as it is"
