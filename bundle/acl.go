package bundle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ACLs. Mode bits do not tell the whole story when an object carries an
// access control list:
//
//   - a POSIX ACL (the system.posix_acl_access xattr: Linux's ext4, XFS,
//     tmpfs, Lustre, GPFS's POSIX mode) makes the group bits of st_mode
//     the ACL's mask, the upper bound for named users and named groups as
//     well as the owning group. The entries that grant write are read
//     from the xattr (S3);
//   - an NFSv4 ACL (system.nfs4_acl, as the Linux NFSv4 client shows it)
//     may grant write to named users and groups that st_mode does not
//     show at all. Its principals are names ("user@domain") that only the
//     site's id mapping ties to uids, so a named principal that may write
//     is refused outright; OWNER@, GROUP@ and EVERYONE@ are what the mode
//     bits show (V6).
//
// GPFS's own NFSv4 ACLs (mmputacl) are not visible as an xattr: docs/FORMAT.md
// says what a site must do there.

// POSIX ACL xattr layout (linux/posix_acl_xattr.h): a little-endian
// version, then entries of tag, perm (16 bits each) and id (32 bits).
const (
	posixACLXattr  = "system.posix_acl_access"
	posixACLVer    = 2
	aclUserObj     = 0x01
	aclUser        = 0x02
	aclGroupObj    = 0x04
	aclGroup       = 0x08
	aclMask        = 0x10
	aclOther       = 0x20
	aclWrite       = 0x2
	nfs4ACLXattr   = "system.nfs4_acl"
	maxACLXattr    = 64 << 10 // the kernel's XATTR_SIZE_MAX
	nfs4AllowedACE = 0
	// nfs4WriteMask: WRITE_DATA/ADD_FILE, APPEND_DATA/ADD_SUBDIRECTORY,
	// DELETE_CHILD, DELETE, WRITE_ACL, WRITE_OWNER (RFC 7530 6.2.1.3).
	nfs4WriteMask = 0x2 | 0x4 | 0x40 | 0x10000 | 0x40000 | 0x80000
)

// fdProblem is statProblem for the object open as fd, with its ACLs read
// (the stat is fd's).
func (p *TrustPolicy) fdProblem(fd int, what, path string, st *unix.Stat_t) string {
	if st.Mode&unix.S_IFMT == unix.S_IFLNK || !p.owner(st.Uid) || st.Mode&0o002 != 0 && !sharedDir(st) {
		return p.statProblem(what, path, st)
	}
	if b, err := readXattr(fd, nfs4ACLXattr); err != nil {
		return fmt.Sprintf("%s: cannot read its NFSv4 ACL to see who may write it: %v", what, err)
	} else if b != nil {
		if who, err := nfs4Writers(b); err != nil {
			return fmt.Sprintf("%s has an NFSv4 ACL kbundle cannot read (%v); who may write it is unknown", what, err)
		} else if len(who) > 0 {
			return fmt.Sprintf("%s has an NFSv4 ACL that lets %s write it, which its mode does not show; "+
				"remove that entry (nfs4_setfacl) or use a directory of your own", what, strings.Join(who, ", "))
		}
	}
	if st.Mode&0o020 == 0 || sharedDir(st) {
		return p.statProblem(what, path, st) // mask without write: no ACL entry can write
	}
	b, err := readXattr(fd, posixACLXattr)
	switch {
	case err != nil && p.group(st.Gid):
		return fmt.Sprintf("%s mode %04o: cannot read its ACL to see who else may write it: %v", what, st.Mode&0o7777, err)
	case err != nil || b == nil:
		return p.statProblem(what, path, st)
	}
	ents, err := parsePosixACL(b)
	if err != nil {
		return fmt.Sprintf("%s has a POSIX ACL kbundle cannot read (%v); who may write it is unknown", what, err)
	}
	// With an ACL, the group bits are the mask: judge the owner and
	// others by the mode, every other writer by its entry.
	noGroup := *st
	noGroup.Mode &^= 0o020
	if msg := p.statProblem(what, path, &noGroup); msg != "" {
		return msg
	}
	mask := uint16(0o7)
	for _, e := range ents {
		if e.tag == aclMask {
			mask = e.perm
		}
	}
	var who []string
	for _, e := range ents {
		if e.perm&mask&aclWrite == 0 {
			continue
		}
		switch {
		case e.tag == aclUser && !p.owner(e.id):
			who = append(who, "user "+ownerName(e.id))
		case e.tag == aclGroup && !p.group(e.id):
			who = append(who, "group "+groupName(e.id))
		case e.tag == aclGroupObj && !p.group(st.Gid):
			who = append(who, "group "+groupName(st.Gid))
		}
	}
	if len(who) == 0 {
		return ""
	}
	fix := "you do not own it: use a directory of your own"
	if st.Uid == uint32(os.Getuid()) {
		fix = "run: chmod g-w " + path + " (with an ACL, that clears the write bit of its mask)"
	}
	return fmt.Sprintf("%s mode %04o has an ACL that lets %s write it; %s", what, st.Mode&0o7777, strings.Join(who, ", "), fix)
}

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// parsePosixACL parses a system.posix_acl_access value.
func parsePosixACL(b []byte) ([]aclEntry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 {
		return nil, fmt.Errorf("%d bytes", len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != posixACLVer {
		return nil, fmt.Errorf("version %d", v)
	}
	var ents []aclEntry
	for b = b[4:]; len(b) > 0; b = b[8:] {
		e := aclEntry{binary.LittleEndian.Uint16(b), binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[4:])}
		switch e.tag {
		case aclUserObj, aclUser, aclGroupObj, aclGroup, aclMask, aclOther:
		default:
			return nil, fmt.Errorf("unknown entry tag %#x", e.tag)
		}
		ents = append(ents, e)
	}
	return ents, nil
}

// nfs4Writers returns the named principals a system.nfs4_acl value (XDR:
// a count, then per entry type, flag, access mask and an opaque who)
// allows to write.
func nfs4Writers(b []byte) ([]string, error) {
	u32 := func() (uint32, error) {
		if len(b) < 4 {
			return 0, errors.New("truncated")
		}
		v := binary.BigEndian.Uint32(b)
		b = b[4:]
		return v, nil
	}
	n, err := u32()
	if err != nil {
		return nil, err
	}
	if uint64(n)*16 > uint64(len(b)) {
		return nil, fmt.Errorf("%d entries in %d bytes", n, len(b))
	}
	var who []string
	for range n {
		var f [4]uint32
		for i := range f {
			if f[i], err = u32(); err != nil {
				return nil, err
			}
		}
		typ, mask, l := f[0], f[2], f[3]
		pad := (uint64(l) + 3) &^ 3
		if pad > uint64(len(b)) {
			return nil, errors.New("truncated")
		}
		name := string(b[:l])
		b = b[pad:]
		switch name {
		case "OWNER@", "GROUP@", "EVERYONE@": // shown by the mode bits
			continue
		}
		if typ == nfs4AllowedACE && mask&nfs4WriteMask != 0 {
			who = append(who, strconv.Quote(name))
		}
	}
	return who, nil
}

// readXattr returns fd's extended attribute name, or nil when it has none
// or the file system has no such attributes. An O_PATH descriptor (the
// directories of the trust walk) is read through /proc/self/fd.
func readXattr(fd int, name string) ([]byte, error) {
	get := func(buf []byte) (int, error) {
		n, err := unix.Fgetxattr(fd, name, buf)
		if errors.Is(err, unix.EBADF) {
			n, err = unix.Getxattr("/proc/self/fd/"+strconv.Itoa(fd), name, buf)
		}
		return n, err
	}
	for range 3 {
		n, err := get(nil)
		if err == nil && n > maxACLXattr {
			return nil, fmt.Errorf("%s is %d bytes, more than %d", name, n, maxACLXattr)
		}
		if err == nil {
			buf := make([]byte, n)
			if n, err = get(buf); err == nil {
				return buf[:n], nil
			}
		}
		switch {
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EOPNOTSUPP):
			return nil, nil
		case !errors.Is(err, unix.ERANGE): // ERANGE: it grew meanwhile
			return nil, err
		}
	}
	return nil, fmt.Errorf("%s keeps changing", name)
}
