package bundle

import (
	"errors"
	"fmt"
	"io"
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

// ReadFile reads and checks the bundle at path as the loader does: one
// open, a trust check of the opened file and its directory, one sequential
// read, then the header, trailer, index and whole-file digest. It returns
// the bundle's bytes, ready for NewReaderBytes or a broadcast.
func ReadFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a FIFO must not hang us (see Open)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkTrustInfo(path, fi); err != nil {
		return nil, err
	}
	size := fi.Size()
	if size < 0 || uint64(size) > MaxDataLen {
		return nil, &Error{File: path, Err: ErrTooLarge, Msg: fmt.Sprintf("%d bytes", size)}
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, &Error{File: path, Err: ErrFormat, Msg: "file shrank while being read"}
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r, err := NewReaderBytes(b)
	if err != nil {
		return nil, inFile(err, path)
	}
	if err := r.VerifyFileDigest(); err != nil {
		return nil, inFile(err, path)
	}
	return b, nil
}
