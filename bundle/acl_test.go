package bundle

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// setACL gives path a POSIX ACL (system.posix_acl_access, written as
// setfacl would) with the owner, group and other bits of its mode plus the
// named entries and a mask of mask; the test is skipped when the file
// system has no ACLs.
func setACL(t *testing.T, path string, groupObj, mask uint16, named ...aclEntry) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	m := uint16(fi.Mode().Perm())
	const none = 0xFFFFFFFF
	ents := []aclEntry{{aclUserObj, m >> 6 & 7, none}}
	for _, e := range named {
		if e.tag == aclUser {
			ents = append(ents, e)
		}
	}
	ents = append(ents, aclEntry{aclGroupObj, groupObj, none})
	for _, e := range named {
		if e.tag == aclGroup {
			ents = append(ents, e)
		}
	}
	ents = append(ents, aclEntry{aclMask, mask, none}, aclEntry{aclOther, m & 7, none})
	b := binary.LittleEndian.AppendUint32(nil, posixACLVer)
	for _, e := range ents {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	if err := unix.Setxattr(path, posixACLXattr, b, 0); errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("%s: no POSIX ACLs on this file system", path)
	} else if err != nil {
		t.Fatal(err)
	}
}

// TestTrustACL is S3 of the 2026-12-01 security review: with a trusted
// group, the group bits of an object with a POSIX ACL are its mask, which
// also bounds named users and groups. A write grant to anyone outside the
// trusted set (you, root, trusted owners and groups) is refused, on the
// bundle and on every directory on the way; the default-ACL project
// directories of GPFS and Lustre (write for a trusted named group) pass.
func TestTrustACL(t *testing.T) {
	data := vector(t, "valid-basic")
	me, mygid := uint32(os.Getuid()), uint32(os.Getgid())
	stranger := uint32(65534) // nobody, outside the trusted set
	if me == stranger {
		stranger = 4242
	}
	trust := &TrustPolicy{Groups: []uint32{mygid}}
	for _, c := range []struct {
		name      string
		onDir     bool   // the ACL is on the project directory, not on the bundle
		groupObj  uint16 // the owning group's entry
		named     []aclEntry
		untrusted string // "" when accepted
	}{
		{name: "named user outside the group may write the bundle", groupObj: 6,
			named: []aclEntry{{aclUser, 6, stranger}}, untrusted: "lets user " + ownerName(stranger) + " write it"},
		{name: "named user outside the group may write the directory", onDir: true, groupObj: 7,
			named: []aclEntry{{aclUser, 7, stranger}}, untrusted: "lets user " + ownerName(stranger) + " write it"},
		{name: "untrusted named group may write", onDir: true, groupObj: 5,
			named: []aclEntry{{aclGroup, 7, 4343}}, untrusted: "lets group " + groupName(4343) + " write it"},
		{name: "named user may only read", groupObj: 6, named: []aclEntry{{aclUser, 4, stranger}}},
		{name: "named user may write but the mask forbids it", named: []aclEntry{{aclUser, 6, stranger}}},
		{name: "you and root as named users", groupObj: 6, named: []aclEntry{{aclUser, 6, me}, {aclUser, 6, 0}}},
		{name: "default-ACL project directory: the trusted group as a named group", onDir: true, groupObj: 5,
			named: []aclEntry{{aclGroup, 7, mygid}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			proj := filepath.Join(t.TempDir(), "proj")
			if err := os.Mkdir(proj, 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chmod(proj, 0o2755)
			file := filepath.Join(proj, "cache.kbundle")
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			target, mask := file, uint16(6)
			if c.onDir {
				target, mask = proj, 7
			}
			if c.name == "named user may write but the mask forbids it" {
				mask = 4
			}
			setACL(t, target, c.groupObj, mask, c.named...)
			err := CheckTrust(file, trust)
			if c.untrusted == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), target+": untrusted: ") || !strings.Contains(err.Error(), c.untrusted) {
				t.Fatalf("%v, want ErrUntrusted naming %s and %q", err, target, c.untrusted)
			}
			// Without the trusted group the mode bits alone refuse it.
			if err := CheckTrust(file, nil); !errors.Is(err, ErrUntrusted) {
				t.Fatalf("no trusted group: %v", err)
			}
		})
	}
}

// TestTrustHardLink is V5 of the 2026-12-01 security review: in a
// directory others can add entries to (the sticky exemption: /tmp),
// another user could hard-link an old bundle of yours or root's under the
// name you load. A bundle with more than one link is refused there, and
// only there.
func TestTrustHardLink(t *testing.T) {
	data := vector(t, "valid-basic")
	shared := os.TempDir()
	var st unix.Stat_t
	if err := unix.Stat(shared, &st); err != nil || !sharedDir(&st) {
		t.Skipf("%s is not a root-owned sticky directory others can write", shared)
	}
	f, err := os.CreateTemp(shared, "kbundle-hardlink-test-*.kbundle")
	if err != nil {
		t.Fatal(err)
	}
	file := f.Name()
	t.Cleanup(func() { os.Remove(file) })
	f.Write(data)
	f.Close()
	if err := CheckTrust(file, nil); err != nil {
		t.Fatalf("one link: %v", err)
	}
	link := file + ".link"
	if err := os.Link(file, link); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.Remove(link) })
	for _, p := range []string{file, link} {
		err := CheckTrust(p, nil)
		if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "file has 2 hard links and is in "+shared) {
			t.Fatalf("%s: %v, want ErrUntrusted naming the links", p, err)
		}
		rc, err := Open(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(rc.Untrusted(), ErrUntrusted) {
			t.Errorf("Open without Trusted: Untrusted() = %v", rc.Untrusted())
		}
		rc.Close()
	}
	// In a directory of your own a second link is harmless.
	own := t.TempDir()
	mine := filepath.Join(own, "b.kbundle")
	if err := os.WriteFile(mine, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(mine, filepath.Join(own, "c.kbundle")); err != nil {
		t.Fatal(err)
	}
	if err := CheckTrust(mine, nil); err != nil {
		t.Fatalf("private directory, two links: %v", err)
	}
}

// TestNFS4Writers: an NFSv4 ACL (system.nfs4_acl, which st_mode does not
// show) that lets a named principal write refuses the object (V6 of the
// 2026-12-01 review); OWNER@, GROUP@ and EVERYONE@ are left to the mode
// bits; read-only and DENY entries do not count. Local file systems have
// no NFSv4 ACLs, so this checks the decision on the attribute's bytes.
func TestNFS4Writers(t *testing.T) {
	type ace struct {
		typ, flag, mask uint32
		who             string
	}
	enc := func(aces ...ace) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(aces)))
		for _, a := range aces {
			for _, v := range []uint32{a.typ, a.flag, a.mask, uint32(len(a.who))} {
				b = binary.BigEndian.AppendUint32(b, v)
			}
			b = append(b, a.who...)
			for len(b)%4 != 0 {
				b = append(b, 0)
			}
		}
		return b
	}
	const read, write, deny = 0x1, 0x2, 1
	for _, c := range []struct {
		name string
		b    []byte
		want string // the principals, or the error's start
	}{
		{"mode-like", enc(ace{0, 0, read | write, "OWNER@"}, ace{0, 0, read | write, "GROUP@"}, ace{0, 0, read, "EVERYONE@"}), ""},
		{"named user may write", enc(ace{0, 0, read | write, "OWNER@"}, ace{0, 0, write, "eve@example.org"}), `"eve@example.org"`},
		{"named group may delete entries", enc(ace{0, 0x40, 0x40, "proj@example.org"}), `"proj@example.org"`},
		{"named user may read", enc(ace{0, 0, read, "eve@example.org"}), ""},
		{"named user denied write", enc(ace{deny, 0, write, "eve@example.org"}), ""},
		{"truncated", enc(ace{0, 0, write, "eve@example.org"})[:20], "error: truncated"},
		{"count beyond the bytes", binary.BigEndian.AppendUint32(nil, 1<<30), "error: 1073741824 entries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			who, err := nfs4Writers(c.b)
			got := strings.Join(who, ", ")
			if err != nil {
				got = "error: " + err.Error()
			}
			if !strings.HasPrefix(got, c.want) || c.want == "" && got != "" {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}
