package bundle

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Trust.
//
// Whoever can write a bundle, or rename or replace any directory or symlink
// on the way to it, decides what code a job that loads it runs. A path is
// trusted when every component, from "/" to the file, is:
//
//   - owned by the current user or root (or by a user listed in
//     KBUNDLE_TRUSTED_OWNERS);
//   - not writable by others, and not writable by its group unless that
//     group is listed in KBUNDLE_TRUSTED_GROUPS; a directory owned by root
//     with the sticky bit (such as /tmp) may be writable by all: others can
//     add entries to it but not rename or remove ours;
//   - for a symlink, owned as above (its target is then checked the same
//     way, component by component).
//
// The components are opened one at a time with openat(2) and O_NOFOLLOW,
// each checked on its open descriptor, so the file that is finally opened
// is the one that was checked: renaming an ancestor between the check and
// the open (B1 of the 2026-11-30 review) cannot substitute another file.
//
// KBUNDLE_TRUSTED_OWNERS and KBUNDLE_TRUSTED_GROUPS (user and group names
// or numeric ids, separated by commas or spaces; both empty by default)
// are the explicit opt-in for bundles shared by a service account or kept
// in a project directory that a group writes: every member of a trusted
// group, and every trusted owner, can then choose the code your jobs run.

// maxLinks bounds the symlinks followed while resolving one path (as the
// kernel's 40).
const maxLinks = 40

type trustPolicy struct {
	me     uint32
	owners map[uint32]bool
	groups map[uint32]bool
}

var (
	policyOnce sync.Once
	policyVal  *trustPolicy
	policyErr  error
)

// policy returns the trust policy of this process (KBUNDLE_TRUSTED_OWNERS
// and KBUNDLE_TRUSTED_GROUPS are read once).
func policy() (*trustPolicy, error) {
	policyOnce.Do(func() { policyVal, policyErr = readPolicy(os.Getenv) })
	return policyVal, policyErr
}

func readPolicy(getenv func(string) string) (*trustPolicy, error) {
	p := &trustPolicy{me: uint32(os.Getuid()), owners: map[uint32]bool{}, groups: map[uint32]bool{}}
	for _, v := range []struct {
		env    string
		set    map[uint32]bool
		lookup func(string) (string, error)
	}{
		{"KBUNDLE_TRUSTED_OWNERS", p.owners, func(n string) (string, error) {
			u, err := user.Lookup(n)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		}},
		{"KBUNDLE_TRUSTED_GROUPS", p.groups, func(n string) (string, error) {
			g, err := user.LookupGroup(n)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		}},
	} {
		for _, n := range strings.FieldsFunc(getenv(v.env), func(r rune) bool { return r == ',' || r == ' ' }) {
			id := n
			if _, err := strconv.ParseUint(n, 10, 32); err != nil {
				if id, err = v.lookup(n); err != nil {
					return nil, fmt.Errorf("%s: %q is not a known name or a number: %w", v.env, n, err)
				}
			}
			x, err := strconv.ParseUint(id, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", v.env, n, err)
			}
			v.set[uint32(x)] = true
		}
	}
	return p, nil
}

// statProblem says why an object with the given stat would let someone
// other than the user (or root, or a trusted owner or group) change what
// it holds or points to, or returns "" when it would not. what is "file",
// "directory" or "symlink".
func (p *trustPolicy) statProblem(what, path string, st *unix.Stat_t) string {
	uid, gid, mode := st.Uid, st.Gid, st.Mode
	if uid != p.me && uid != 0 && !p.owners[uid] {
		return fmt.Sprintf("%s is owned by uid %d, not by you (uid %d) or root%s; copy it to a place you own "+
			"(or, to share bundles, see KBUNDLE_TRUSTED_OWNERS in docs/troubleshooting.md)", what, uid, p.me, userName(uid))
	}
	if mode&unix.S_IFMT == unix.S_IFLNK {
		return "" // a symlink's own mode bits mean nothing
	}
	sticky := mode&unix.S_IFMT == unix.S_IFDIR && mode&unix.S_ISVTX != 0 && uid == 0
	perm := mode & 0o777
	switch {
	case perm&0o002 != 0 && !sticky:
		return fmt.Sprintf("%s mode %04o lets others write it; run: chmod go-w %s", what, perm, path)
	case perm&0o020 != 0 && !sticky && !p.groups[gid]:
		return fmt.Sprintf("%s mode %04o lets others write it; run: chmod go-w %s "+
			"(its group %s can write it; to trust a project group, see KBUNDLE_TRUSTED_GROUPS in docs/troubleshooting.md)", what, perm, path, gidName(gid))
	}
	return ""
}

// userName returns " (user NAME)" for uid, or "" when it has no name.
func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return " (user " + u.Username + ")"
	}
	return ""
}

func gidName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		return fmt.Sprintf("%d (%s)", gid, g.Name)
	}
	return strconv.FormatUint(uint64(gid), 10)
}

// CheckTrust checks that the bundle file path, every directory on the way
// to it and every symlink it goes through could only have been written by
// you or root (see the rules above). It returns an error wrapping
// ErrUntrusted that names the offending path, its owner or mode, and the
// fix. To check and then read the same file, use Open with
// OpenOptions.Trusted (or OpenTrusted): a check by path followed by a second
// open is a race.
func CheckTrust(path string) error {
	f, err := OpenTrusted(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// OpenTrusted opens the regular file path for reading after checking,
// component by component on open descriptors, that it is trusted (see
// CheckTrust). The returned file is the one that was checked.
func OpenTrusted(path string) (*os.File, error) {
	f, _, err := openTrustedPath(path, false, true)
	return f, err
}

// checkTrustDir is CheckTrust for a directory.
func checkTrustDir(path string) error {
	f, _, err := openTrustedPath(path, true, true)
	if err != nil {
		return err
	}
	return f.Close()
}

type dirFD struct {
	fd   int
	path string
}

// openTrustedPath opens name (a regular file, or a directory if wantDir)
// component by component. strict: the first untrusted component is the
// error. Otherwise the walk goes on and the first problem is returned as
// untrusted beside the opened file, for commands that only read a bundle
// and report whether load would accept it.
func openTrustedPath(name string, wantDir, strict bool) (_ *os.File, untrusted, err error) {
	p, err := policy()
	if err != nil {
		return nil, nil, err
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, nil, err
	}
	// O_PATH: a directory may be searchable but not readable (a 0711
	// home); lookups and fstat need no more.
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	stack := []dirFD{{root, "/"}}
	defer func() {
		for _, d := range stack {
			unix.Close(d.fd)
		}
	}()
	// problem records an untrusted component; in strict mode it stops.
	problem := func(path, msg string) error {
		e := &Error{File: path, Err: ErrUntrusted, Msg: msg}
		if untrusted == nil {
			untrusted = e
		}
		if strict {
			return e
		}
		return nil
	}
	check := func(fd int, what, path string) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return &os.PathError{Op: "fstat", Path: path, Err: err}
		}
		if msg := p.statProblem(what, path, &st); msg != "" {
			return problem(path, msg)
		}
		return nil
	}
	if err := check(root, "directory", "/"); err != nil {
		return nil, nil, err
	}
	comps := splitPath(abs)
	links := 0
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		top := stack[len(stack)-1]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) > 1 {
				unix.Close(top.fd)
				stack = stack[:len(stack)-1]
			}
			continue
		}
		path := filepath.Join(top.path, c)
		var st unix.Stat_t
		if err := unix.Fstatat(top.fd, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, nil, &os.PathError{Op: "stat", Path: path, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			// The directory holding the link passed the check, so only a
			// trusted user could have put it there, unless the directory
			// is sticky: then the link's owner must be trusted too.
			if msg := p.statProblem("symlink", path, &st); msg != "" {
				if err := problem(path, msg); err != nil {
					return nil, nil, err
				}
			}
			if links++; links > maxLinks {
				return nil, nil, &os.PathError{Op: "open", Path: abs, Err: unix.ELOOP}
			}
			target, err := readlinkat(top.fd, c)
			if err != nil {
				return nil, nil, &os.PathError{Op: "readlink", Path: path, Err: err}
			}
			if filepath.IsAbs(target) {
				for _, d := range stack[1:] {
					unix.Close(d.fd)
				}
				stack = stack[:1]
			}
			comps = append(splitPath(target), comps...)
			continue
		}
		if len(comps) > 0 || wantDir {
			fd, err := unix.Openat(top.fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
			}
			stack = append(stack, dirFD{fd, path})
			if err := check(fd, "directory", path); err != nil {
				return nil, nil, err
			}
			continue
		}
		// O_NONBLOCK: opening a FIFO must not wait for a writer (a hang);
		// it is then refused as not regular. O_NOFOLLOW: the entry was not
		// a symlink a moment ago; if it is one now, someone is racing us.
		fd, err := unix.Openat(top.fd, c, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		f := os.NewFile(uintptr(fd), name)
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			f.Close()
			return nil, nil, &os.PathError{Op: "fstat", Path: path, Err: err}
		}
		if fst.Mode&unix.S_IFMT != unix.S_IFREG {
			f.Close()
			return nil, nil, &Error{File: name, Err: ErrFormat, Msg: "not a regular file"}
		}
		if err := check(fd, "file", name); err != nil {
			f.Close()
			return nil, nil, err
		}
		return f, untrusted, nil
	}
	// The path ended on a directory.
	top := stack[len(stack)-1]
	if !wantDir {
		return nil, nil, &Error{File: name, Err: ErrFormat, Msg: "not a regular file"}
	}
	fd, err := unix.Openat(top.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), untrusted, nil
}

func splitPath(p string) []string { return strings.Split(p, "/") }

func readlinkat(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		m, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if m < n {
			return string(buf[:m]), nil
		}
		if n > 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}
