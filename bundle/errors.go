package bundle

import (
	"errors"
	"fmt"
	"syscall"
)

// Sentinel errors. Every error returned by this package that is about a
// bundle's content wraps one of them (test with errors.Is) and names the
// file and, where useful, the entry.
var (
	// ErrFormat: not a bundle, or its structure breaks docs/FORMAT.md.
	ErrFormat = errors.New("not a valid bundle")
	// ErrVersion: a bundle of a format version this reader does not know.
	ErrVersion = errors.New("unsupported bundle version")
	// ErrChecksum: content does not match its recorded digest.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrInsecurePath: an entry name that could escape the destination
	// (absolute, "..", backslash, empty, duplicate...).
	ErrInsecurePath = errors.New("insecure path")
	// ErrTooLarge: a length or count beyond the format's limits.
	ErrTooLarge = errors.New("too large")
	// ErrUntrusted: a bundle or directory that someone else could write.
	ErrUntrusted = errors.New("untrusted")
	// ErrExist: extraction destination exists and is not empty.
	ErrExist = errors.New("destination exists and is not empty")
	// ErrChanged: the destination is a tree kbundle installed that
	// changed since (the job compiled more in it). It says what ErrExist
	// says and matches it; a front end tells the two apart to say how
	// to keep what changed.
	ErrChanged = fmt.Errorf("%w", ErrExist)
	// ErrDestination: the extraction destination cannot be used: a
	// symlink, a file, a mount point, another user's directory, a tree
	// kbundle did not install (for Force), or a parent directory others
	// can write. The message says which, and what to do.
	ErrDestination = errors.New("destination refused")
	// ErrNoSpace: the bundle's declared size or entry count does not fit
	// in the free space or inodes at the destination (checked before
	// anything is written). It matches syscall.ENOSPC too.
	ErrNoSpace = fmt.Errorf("not enough space at the destination: %w", syscall.ENOSPC)
	// ErrNoParent: a parent directory of the extraction destination does
	// not exist (ExtractOptions.Parents creates the missing ones).
	ErrNoParent = errors.New("no such parent directory")
)

// Error is the error type of this package: what went wrong (Err, one of the
// sentinels or an I/O error), in which file and, optionally, which entry.
type Error struct {
	File  string // bundle or directory path, may be empty for in-memory bundles
	Entry string // entry name, may be empty
	Err   error  // the sentinel or underlying error
	Msg   string // detail
}

func (e *Error) Error() string {
	s := ""
	if e.File != "" {
		s = e.File + ": "
	}
	if e.Entry != "" {
		s += fmt.Sprintf("entry %q: ", e.Entry)
	}
	s += e.Err.Error()
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func errf(sentinel error, format string, args ...any) *Error {
	return &Error{Err: sentinel, Msg: fmt.Sprintf(format, args...)}
}

// inFile sets the file name on err when it is one of ours and lacks one.
func inFile(err error, file string) error {
	var e *Error
	if errors.As(err, &e) && e.File == "" {
		e.File = file
	}
	return err
}
