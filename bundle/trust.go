package bundle

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// CheckTrust checks that the bundle file path and the directory holding it
// belong to the current user or root and that nobody else can write them:
// no group or other write bit (a root-owned directory with the sticky bit,
// such as /tmp, is accepted: others cannot replace a file in it). It
// returns an error wrapping ErrUntrusted that names the path, its owner and
// mode, and the fix.
func CheckTrust(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return checkTrustInfo(path, fi)
}

func checkTrustInfo(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return &Error{File: path, Err: ErrFormat, Msg: "not a regular file"}
	}
	if err := trusted(path, fi, false); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(real)
	di, err := os.Stat(dir)
	if err != nil {
		return err
	}
	return trusted(dir, di, true)
}

func trusted(path string, fi fs.FileInfo, isDir bool) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	me := uint32(os.Getuid())
	what := "file"
	if isDir {
		what = "directory"
	}
	if st.Uid != me && st.Uid != 0 {
		return &Error{File: path, Err: ErrUntrusted, Msg: fmt.Sprintf(
			"%s is owned by uid %d, not by you (uid %d) or root; copy it to a place you own", what, st.Uid, me)}
	}
	mode := fi.Mode()
	if mode.Perm()&0o022 != 0 && !(isDir && st.Uid == 0 && mode&fs.ModeSticky != 0) {
		return &Error{File: path, Err: ErrUntrusted, Msg: fmt.Sprintf(
			"%s mode %04o lets others write it; run: chmod go-w %s", what, mode.Perm(), path)}
	}
	return nil
}
