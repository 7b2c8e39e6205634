package bundle

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Trust.
//
// Whoever can write a bundle, or rename or replace any directory or symlink
// on the way to it, decides what code a job that loads it runs. A path is
// trusted when every component, from "/" to the file, is:
//
//   - owned by the current user or root (or by a trusted owner of the
//     TrustPolicy);
//   - not writable by others, and not writable by its group unless that
//     group is trusted; a directory owned by root with the sticky bit
//     (such as /tmp) may be writable by all: others can add entries to it
//     but not rename or remove ours;
//   - when it carries a POSIX ACL (system.posix_acl_access), its group
//     bits are the ACL's mask: then every entry that lets someone write
//     (a named user, a named group, the owning group) must name you,
//     root, a trusted owner or a trusted group (S3 of the 2026-12-01
//     review);
//   - when it carries an NFSv4 ACL (system.nfs4_acl, which mode bits do
//     not show), no entry may let a named user or group write it (V6);
//   - for a symlink, owned as above (its target is then checked the same
//     way, component by component);
//   - for the bundle file in a directory others can write (the sticky
//     exemption), not hard-linked elsewhere: another user could have
//     linked an old bundle of yours or root's under the name you load (V5).
//
// The components are opened one at a time with openat(2) and O_NOFOLLOW,
// each checked on its open descriptor, so the file that is finally opened
// is the one that was checked: renaming an ancestor between the check and
// the open (B1 of the 2026-11-30 review) cannot substitute another file.
//
// A TrustPolicy (trusted owners and groups, none by default) is the
// explicit opt-in for bundles shared by a service account or kept in a
// project directory that a group writes: every member of a trusted group,
// and every trusted owner, can then choose the code your jobs run. The
// front ends build it from KBUNDLE_TRUSTED_OWNERS and
// KBUNDLE_TRUSTED_GROUPS with ParseTrust; this package reads neither.

// maxLinks bounds the symlinks followed while resolving one path (as the
// kernel's 40).
const maxLinks = 40

// TrustPolicy names whom a trust check accepts besides the current user
// and root. A nil *TrustPolicy trusts no one else.
type TrustPolicy struct {
	// Owners are users (uids) whose files, directories and symlinks are
	// trusted as yours.
	Owners []uint32
	// Groups are groups (gids) whose write permission is accepted.
	Groups []uint32
}

// ErrTrustPolicy: a trusted owner or group that is neither a known name
// nor a number (ParseTrust). It is a usage error, not an unusable bundle.
var ErrTrustPolicy = errors.New("bad trust setting")

// ParseTrust builds a TrustPolicy from the values of
// KBUNDLE_TRUSTED_GROUPS and KBUNDLE_TRUSTED_OWNERS: group and user names
// or numeric ids, separated by commas or spaces (both may be empty). The
// error wraps ErrTrustPolicy and names the variable and the bad item.
func ParseTrust(groups, owners string) (*TrustPolicy, error) {
	p := &TrustPolicy{}
	for _, v := range []struct {
		env, val string
		set      *[]uint32
		lookup   func(string) (string, error)
	}{
		{"KBUNDLE_TRUSTED_OWNERS", owners, &p.Owners, func(n string) (string, error) {
			u, err := user.Lookup(n)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		}},
		{"KBUNDLE_TRUSTED_GROUPS", groups, &p.Groups, func(n string) (string, error) {
			g, err := user.LookupGroup(n)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		}},
	} {
		for _, n := range strings.FieldsFunc(v.val, func(r rune) bool { return r == ',' || r == ' ' }) {
			id := n
			if _, err := strconv.ParseUint(n, 10, 32); err != nil {
				if id, err = v.lookup(n); err != nil {
					return nil, fmt.Errorf("%w: %s: %q is not a known name or a number", ErrTrustPolicy, v.env, n)
				}
			}
			x, err := strconv.ParseUint(id, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %q: %w", ErrTrustPolicy, v.env, n, err)
			}
			*v.set = append(*v.set, uint32(x))
		}
	}
	return p, nil
}

// owner reports whether files owned by uid are trusted: yours, root's or
// a trusted owner's.
func (p *TrustPolicy) owner(uid uint32) bool {
	return uid == uint32(os.Getuid()) || uid == 0 || p != nil && slices.Contains(p.Owners, uid)
}

// group reports whether gid is a trusted group.
func (p *TrustPolicy) group(gid uint32) bool { return p != nil && slices.Contains(p.Groups, gid) }

// statProblem says why an object with the given stat would let someone
// other than the user (or root, or a trusted owner or group) change what
// it holds or points to, or returns "" when it would not. what is "file",
// "directory" or "symlink". It sees mode bits only; fdProblem also reads
// the ACLs.
func (p *TrustPolicy) statProblem(what, path string, st *unix.Stat_t) string {
	uid, gid, mode := st.Uid, st.Gid, st.Mode
	if !p.owner(uid) {
		fix := "copy it to a directory of your own"
		if what != "file" {
			fix = "use a directory of your own"
		}
		you := "you (root)"
		if me := uint32(os.Getuid()); me != 0 {
			you = fmt.Sprintf("you (uid %d) or root", me)
			if n := userArg(me); n != strconv.FormatUint(uint64(me), 10) {
				you = fmt.Sprintf("you (%s, uid %d) or root", n, me)
			}
		}
		return fmt.Sprintf("%s is owned by %s, not by %s; %s, or trust its owner with KBUNDLE_TRUSTED_OWNERS=%s",
			what, ownerName(uid), you, fix, userArg(uid))
	}
	if mode&unix.S_IFMT == unix.S_IFLNK {
		return "" // a symlink's own mode bits mean nothing
	}
	if sharedDir(st) {
		return ""
	}
	others, grp := mode&0o002 != 0, mode&0o020 != 0 && !p.group(gid)
	if !others && !grp {
		return ""
	}
	who := "others"
	if !others {
		who = "group " + groupName(gid)
	}
	msg := fmt.Sprintf("%s mode %04o lets %s write it", what, mode&0o7777, who)
	switch {
	case uid == uint32(os.Getuid()) && others && grp:
		return msg + "; run: chmod go-w " + path
	case uid == uint32(os.Getuid()) && others:
		return msg + "; run: chmod o-w " + path
	case uid == uint32(os.Getuid()):
		return msg + "; run: chmod g-w " + path
	case others:
		return msg + "; you do not own it: use a directory of your own"
	}
	return msg + "; you do not own it: use a directory of your own, or trust the group with KBUNDLE_TRUSTED_GROUPS=" + groupArg(gid)
}

// sharedDir reports whether st is a directory others may write by the
// sticky exemption: root's, with the sticky bit, writable by its group or
// others.
func sharedDir(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&unix.S_ISVTX != 0 && st.Uid == 0 && st.Mode&0o022 != 0
}

// ownerName returns "NAME (uid N)", or "uid N" when uid has no name.
func ownerName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// userArg returns uid's name, else its number, for KBUNDLE_TRUSTED_OWNERS.
func userArg(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// groupName returns "NAME (gid N)", or "gid N" when gid has no name.
func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		return fmt.Sprintf("%s (gid %d)", g.Name, gid)
	}
	return fmt.Sprintf("gid %d", gid)
}

// groupArg returns gid's name, else its number, for KBUNDLE_TRUSTED_GROUPS.
func groupArg(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		return g.Name
	}
	return strconv.FormatUint(uint64(gid), 10)
}

// CheckTrust checks that the bundle file path, every directory on the way
// to it and every symlink it goes through could only have been written by
// you or root (see the rules above). It returns an error wrapping
// ErrUntrusted that names the offending path, its owner or mode, and the
// fix. p adds trusted owners and groups (nil: none). To check and then
// read the same file, use Open with OpenOptions.Trusted (or OpenTrusted):
// a check by path followed by a second open is a race.
func CheckTrust(path string, p *TrustPolicy) error {
	f, err := OpenTrusted(path, p)
	if err != nil {
		return err
	}
	return f.Close()
}

// OpenTrusted opens the regular file path for reading after checking,
// component by component on open descriptors, that it is trusted (see
// CheckTrust). The returned file is the one that was checked.
func OpenTrusted(path string, p *TrustPolicy) (*os.File, error) {
	f, _, err := openTrustedPath(path, p, false, true)
	return f, err
}

// checkTrustDir is CheckTrust for a directory.
func checkTrustDir(path string, p *TrustPolicy) error {
	f, _, err := openTrustedPath(path, p, true, true)
	if err != nil {
		return err
	}
	return f.Close()
}

type dirFD struct {
	fd     int
	path   string
	shared bool // others may add entries (sharedDir)
}

// openTrustedPath opens name (a regular file, or a directory if wantDir)
// component by component. strict: the first untrusted component is the
// error. Otherwise the walk goes on and the first problem is returned as
// untrusted beside the opened file, for commands that only read a bundle
// and report whether load would accept it.
func openTrustedPath(name string, p *TrustPolicy, wantDir, strict bool) (_ *os.File, untrusted, err error) {
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
	stack := []dirFD{{fd: root, path: "/"}}
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
	check := func(fd int, what, path string, st *unix.Stat_t) error {
		if err := unix.Fstat(fd, st); err != nil {
			return &os.PathError{Op: "fstat", Path: path, Err: err}
		}
		if msg := p.fdProblem(fd, what, path, st); msg != "" {
			return problem(path, msg)
		}
		return nil
	}
	var st unix.Stat_t
	if err := check(root, "directory", "/", &st); err != nil {
		return nil, nil, err
	}
	stack[0].shared = sharedDir(&st)
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
			stack = append(stack, dirFD{fd: fd, path: path})
			var dst unix.Stat_t
			if err := check(fd, "directory", path, &dst); err != nil {
				return nil, nil, err
			}
			stack[len(stack)-1].shared = sharedDir(&dst)
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
		if err := check(fd, "file", name, &fst); err != nil {
			f.Close()
			return nil, nil, err
		}
		if fst.Nlink > 1 && top.shared {
			if err := problem(name, fmt.Sprintf("file has %d hard links and is in %s, where others can add entries: "+
				"another user could have linked an old bundle under this name; copy it to a directory of your own", fst.Nlink, top.path)); err != nil {
				f.Close()
				return nil, nil, err
			}
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

// userName returns " (user NAME)" for uid, or "" when it has no name.
func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return " (user " + u.Username + ")"
	}
	return ""
}
