package bundle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// asUserEnv names the helper step TestAsUserHelper runs: the test binary
// re-runs itself as another user (setpriv) for the steps of one member
// of a shared set.
const asUserEnv = "KBUNDLE_TEST_AS_USER"

// TestAsUserHelper is not a test: run by asUser as another user, it does
// one step ($KBUNDLE_TEST_AS_USER and its arguments after "--") and
// prints its outcome.
func TestAsUserHelper(t *testing.T) {
	step := os.Getenv(asUserEnv)
	if step == "" {
		t.Skip("a helper of the shared-set tests")
	}
	args := flagArgs()
	trust, err := ParseTrust(os.Getenv("KBUNDLE_TRUSTED_GROUPS"), os.Getenv("KBUNDLE_TRUSTED_OWNERS"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	switch step {
	case "pack": // pack SET FILE CONTENT
		src := t.TempDir()
		os.WriteFile(filepath.Join(src, args[1]), []byte(args[2]), 0o644)
		res, err := Pack(ctx, src, args[0], &PackOptions{Trust: trust})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("untrusted: %v\n", res.Untrusted)
	case "layer": // layer SET FILE CONTENT
		p, err := WriteLayer(ctx, args[0], &LayerOptions{Trust: trust}, func(w *Writer) error {
			return w.WriteFile(args[1], 0o644, time.Unix(1, 0), []byte(args[2]))
		})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("untrusted: %v\n", p.Untrusted)
	case "read": // read FILE
		b, err := os.ReadFile(args[0])
		fmt.Printf("read %d bytes: %v\n", len(b), err)
	case "use": // use SET UNIT
		if _, err := WriteUseRecord(ctx, args[0], &UseRecord{By: "harvest", Units: map[string]Use{args[1]: {Time: time.Now()}}}); err != nil {
			t.Fatal(err)
		}
	case "open": // open SET: the files of the merged view
		s, err := OpenSet(args[0], &OpenOptions{Trusted: true, Trust: trust})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		fmt.Printf("layers: %d\n", len(s.Layers))
	default:
		t.Fatalf("unknown step %q", step)
	}
}

// flagArgs are the arguments after "--" on the command line.
func flagArgs() []string {
	for i, a := range os.Args {
		if a == "--" {
			return os.Args[i+1:]
		}
	}
	return nil
}

// sharedSelf copies the test binary to where the test users can run it,
// once per test (removed at its end).
func sharedSelf(t *testing.T) string {
	t.Helper()
	if p, ok := selfCopies.Load(t.Name()); ok {
		return p.(string)
	}
	dir, err := os.MkdirTemp("", "kbundle-share-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir); selfCopies.Delete(t.Name()) })
	os.Chmod(dir, 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "bundle.test")
	if out, err := exec.Command("cp", self, p).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	selfCopies.Store(t.Name(), p)
	return p
}

// selfCopies are sharedSelf's copies, by test.
var selfCopies sync.Map

// asUser runs a TestAsUserHelper step as u (with the team group as a
// supplementary group) under umask 022, with env added; it returns the
// step's output and whether it succeeded.
func asUser(t *testing.T, u testUser, team int, env []string, step string, args ...string) (string, bool) {
	t.Helper()
	argv := []string{"--reuid", strconv.Itoa(u.uid), "--regid", strconv.Itoa(u.gid), "--groups", strconv.Itoa(team), "--",
		sharedSelf(t), "-test.run=^TestAsUserHelper$", "-test.count=1", "--"}
	cmd := exec.Command("setpriv", append(argv, args...)...)
	cmd.Env = append(append(os.Environ(), asUserEnv+"="+step, "HOME=/"), env...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// sharedRoot is a directory the test users can enter (0755), removed at
// the end.
func sharedRoot(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not installed (util-linux)")
	}
	d, err := os.MkdirTemp("", "kbundle-share-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// setDefaultACL gives the directory path the default ACL setfacl -d -m
// g:GID:rwx would (user, group and other of its mode, the named group,
// mask rwx); skipped where the file system has no ACLs.
func setDefaultACL(t *testing.T, path string, gid uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	m := uint16(st.Mode & 0o777)
	const none = 0xFFFFFFFF
	ents := []aclEntry{{aclUserObj, m >> 6 & 7, none}, {aclGroupObj, m >> 3 & 7, none}, {aclGroup, 7, gid}, {aclMask, 7, none}, {aclOther, m & 7, none}}
	b := binary.LittleEndian.AppendUint32(nil, posixACLVer)
	for _, e := range ents {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	if err := unix.Setxattr(path, "system.posix_acl_default", b, 0); errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("%s: no POSIX ACLs on this file system", path)
	} else if err != nil {
		t.Fatal(err)
	}
	setACL(t, path, m>>3&7, 7, aclEntry{aclGroup, 7, gid})
}

// TestSharedSetOrders (H5 and H4 of the 2026-12-01b review, issue 26):
// a shared set works for every member whatever the order they come in.
// In a setgid group directory (2775, and 2775 with a default ACL giving
// the group write), whoever makes the layer directory first, by a use
// record alone (H5: it was made 2755, and no other member could ever add
// a layer) or by a layer, makes it group-writable and setgid, so that the
// other member adds layers too, and each member loads the whole set
// trusting the group and the other. In a root-owned sticky 1777
// directory (H4: the layer directory was made 0775, group the user's
// own, and every load after the first layer refused the set), the layer
// directory is 0755 and the set stays loadable.
func TestSharedSetOrders(t *testing.T) {
	alice, bob, team := teamUsers(t)
	trust := []string{"KBUNDLE_TRUSTED_GROUPS=" + testTeam}
	trustBob := append(trust, "KBUNDLE_TRUSTED_OWNERS="+testBob)
	trustAlice := append(trust, "KBUNDLE_TRUSTED_OWNERS="+testAlice)
	must := func(t *testing.T, u testUser, env []string, step string, args ...string) string {
		t.Helper()
		out, ok := asUser(t, u, team, env, step, args...)
		if !ok {
			t.Fatalf("%s's %s %s failed:\n%s", u.name, step, strings.Join(args, " "), out)
		}
		return out
	}
	group := func(t *testing.T, acl bool) string {
		proj := filepath.Join(sharedRoot(t), "proj")
		os.Mkdir(proj, 0o755)
		os.Chown(proj, alice.uid, team)
		unix.Chmod(proj, 0o2775)
		if acl {
			setDefaultACL(t, proj, uint32(team))
		}
		return filepath.Join(proj, "set.kbundle")
	}
	checkDir := func(t *testing.T, set string) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(LayerDir(set), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o020 == 0 || st.Mode&unix.S_ISGID == 0 || st.Gid != uint32(team) {
			t.Errorf("%s: mode %04o, gid %d; want group-writable, setgid, the team's (gid %d)", LayerDir(set), st.Mode&0o7777, st.Gid, team)
		}
	}
	for _, acl := range []bool{false, true} {
		name := "2775"
		if acl {
			name = "2775+default-ACL"
		}
		t.Run(name+"/use-record-first", func(t *testing.T) {
			set := group(t, acl)
			must(t, alice, trust, "pack", set, "k", "base")
			must(t, alice, trust, "use", set, "k")
			checkDir(t, set)
			must(t, bob, trustAlice, "layer", set, "b", "bob's")
			must(t, alice, trustBob, "layer", set, "a", "alice's")
			openBoth(t, set, team, alice, bob, trustBob, trustAlice, 3)
		})
		t.Run(name+"/other-member-first-layer", func(t *testing.T) {
			set := group(t, acl)
			must(t, alice, trust, "pack", set, "k", "base")
			must(t, bob, trustAlice, "layer", set, "b", "bob's")
			checkDir(t, set)
			must(t, alice, trustBob, "use", set, "k")
			must(t, alice, trustBob, "layer", set, "a", "alice's")
			openBoth(t, set, team, alice, bob, trustBob, trustAlice, 3)
		})
	}
	t.Run("2775/made-2755-before", func(t *testing.T) {
		// A PATH.d that a kbundle before H5's fix made 2755 (alice's): her
		// next use record or layer gives it the group's write bit.
		set := group(t, false)
		must(t, alice, trust, "pack", set, "k", "base")
		os.Mkdir(LayerDir(set), 0o755)
		os.Chown(LayerDir(set), alice.uid, team)
		unix.Chmod(LayerDir(set), 0o2755)
		if out, ok := asUser(t, bob, team, trustAlice, "layer", set, "b", "bob's"); ok {
			t.Fatalf("bob's layer went into a 2755 PATH.d of alice's:\n%s", out)
		}
		must(t, alice, trust, "use", set, "k")
		checkDir(t, set)
		must(t, bob, trustAlice, "layer", set, "b", "bob's")
		openBoth(t, set, team, alice, bob, trustBob, trustAlice, 2)
	})
	t.Run("1777", func(t *testing.T) {
		tmp := filepath.Join(sharedRoot(t), "tmp")
		os.Mkdir(tmp, 0o755)
		unix.Chmod(tmp, 0o1777)
		set := filepath.Join(tmp, "set.kbundle")
		must(t, alice, nil, "pack", set, "k", "base")
		out := must(t, alice, nil, "layer", set, "a", "alice's")
		if !strings.Contains(out, "untrusted: <nil>") {
			t.Errorf("the layer is reported untrusted:\n%s", out)
		}
		var st unix.Stat_t
		if err := unix.Stat(LayerDir(set), &st); err != nil || st.Mode&0o022 != 0 {
			t.Errorf("%s: mode %04o, %v; want writable by its owner alone", LayerDir(set), st.Mode&0o7777, err)
		}
		if out := must(t, alice, nil, "open", set); !strings.Contains(out, "layers: 2") {
			t.Errorf("alice's load of her set after its first layer:\n%s", out)
		}
		must(t, alice, nil, "use", set, "k")
		if out := must(t, alice, nil, "open", set); !strings.Contains(out, "layers: 2") {
			t.Errorf("alice's load of her set after a use record:\n%s", out)
		}
	})
}

// openBoth: each member loads the whole set (want bundles) trusting the
// group and the other.
func openBoth(t *testing.T, set string, team int, alice, bob testUser, trustBob, trustAlice []string, want int) {
	t.Helper()
	for _, c := range []struct {
		u   testUser
		env []string
	}{{alice, trustBob}, {bob, trustAlice}} {
		out, ok := asUser(t, c.u, team, c.env, "open", set)
		if !ok || !strings.Contains(out, fmt.Sprintf("layers: %d", want)) {
			t.Errorf("%s's load of the set: want %d bundles:\n%s", c.u.name, want, out)
		}
	}
}

// TestPrivateFilesPrivateBundle is X4 of the 2026-12-01b review: a file
// the job wrote 0600 into DEST was harvested into a layer that was
// always 0644, which any local user could read. A bundle (layer, merged
// base) is never more readable than what it holds: the
// group's and others' read bits go when a file lacks them, or a
// directory their search bit. Another real user then cannot read it.
func TestPrivateFilesPrivateBundle(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]fs.FileMode // name → mode; "d/" a directory
		want  fs.FileMode
	}{
		{"all readable", map[string]fs.FileMode{"a": 0o644, "d/": 0o755, "d/b": 0o444}, 0o644},
		{"a private file", map[string]fs.FileMode{"a": 0o644, "credentials": 0o600}, 0o600},
		{"group-readable", map[string]fs.FileMode{"a": 0o640}, 0o640},
		{"a private directory", map[string]fs.FileMode{"d/": 0o700, "d/b": 0o644}, 0o600},
		{"a group directory", map[string]fs.FileMode{"d/": 0o750, "d/b": 0o644}, 0o640},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			set := filepath.Join(dir, "set.kbundle")
			writeLayer(t, set, map[string]string{"base": "x"})
			p, err := WriteLayer(context.Background(), set, nil, func(w *Writer) error {
				for n, m := range c.files {
					var err error
					if strings.HasSuffix(n, "/") {
						err = w.Mkdir(strings.TrimSuffix(n, "/"), m, time.Unix(1, 0))
					} else {
						err = w.WriteFile(n, m, time.Unix(1, 0), []byte("secret"))
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(p.Path)
			if err != nil || fi.Mode().Perm() != c.want {
				t.Fatalf("layer %s: mode %v, %v; want %04o", p.Path, fi.Mode(), err, c.want)
			}
			if _, err := MergeSet(context.Background(), set, &MergeOptions{}); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(set); err != nil || fi.Mode().Perm() != c.want {
				t.Errorf("merged base: mode %v, %v; want %04o", fi.Mode(), err, c.want)
			}
		})
	}
	t.Run("another user", func(t *testing.T) {
		alice, bob, team := teamUsers(t)
		root := sharedRoot(t)
		os.Chown(root, alice.uid, alice.gid)
		set := filepath.Join(root, "set.kbundle")
		if out, ok := asUser(t, alice, team, nil, "pack", set, "k", "base"); !ok {
			t.Fatal(out)
		}
		p, err := WriteLayer(context.Background(), set, nil, func(w *Writer) error {
			return w.WriteFile("credentials", 0o600, time.Unix(1, 0), []byte("token=s3cr3t"))
		})
		if err != nil {
			t.Fatal(err)
		}
		os.Chown(p.Path, alice.uid, alice.gid)
		out, _ := asUser(t, bob, team, nil, "read", p.Path)
		if !strings.Contains(out, "permission denied") {
			t.Errorf("bob reads alice's private layer:\n%s", out)
		}
	})
}

// TestUseRecordsTrustedWriters is X1 of the 2026-12-01b review: use
// records were honoured whoever wrote them, so a member whose layers the
// reader refuses decided, with one record dated 2099, what the reader's
// pruning deleted. A record is read only when its owner is trusted as a
// layer's would be; another's is skipped and named, and a last use in
// the future counts as now.
func TestUseRecordsTrustedWriters(t *testing.T) {
	alice, bob, team := teamUsers(t)
	dir := filepath.Join(sharedRoot(t), "proj")
	os.Mkdir(dir, 0o755)
	os.Chown(dir, alice.uid, team)
	unix.Chmod(dir, 0o2775)
	set := filepath.Join(dir, "set.kbundle")
	writeLayer(t, set, map[string]string{"u1": "1", "u2": "2"})
	os.Mkdir(LayerDir(set), 0o2775)
	write := func(name string, u testUser, units string) string {
		p := filepath.Join(LayerDir(set), name)
		b := `{"kbundle_use_record":1,"written":"2026-12-01T00:00:00Z","by":"harvest","units":[` + units + "]}\n"
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Lchown(p, u.uid, team)
		return p
	}
	write("use-00000000000000a1.json", alice, `{"unit":"u1","last_use":"2026-11-30T00:00:00Z"}`)
	bobs := write("use-00000000000000b0.json", bob, `{"unit":"u2","last_use":"2099-01-01T00:00:00Z"}`)
	trustAlice := &TrustPolicy{Owners: []uint32{uint32(alice.uid)}, Groups: []uint32{uint32(team)}}
	u, err := ReadUses(set, trustAlice)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Units["u2"]; ok || len(u.Records) != 1 || len(u.Skipped) != 1 || !strings.Contains(u.Skipped[0], bobs) || !strings.Contains(u.Skipped[0], testBob) {
		t.Fatalf("bob's record was not skipped and named: %+v", u)
	}
	if _, ok := u.Units["u1"]; !ok {
		t.Fatalf("alice's (trusted) record was not read: %+v", u)
	}
	res, err := MergeSet(context.Background(), set, &MergeOptions{LayerOptions: LayerOptions{Trust: trustAlice}, Unit: CacheUnit, MaxSize: 1, DryRun: true})
	if err != nil || len(res.UsesSkipped) != 1 {
		t.Fatalf("MergeSet = %+v, %v; want bob's record skipped and named", res, err)
	}
	both := &TrustPolicy{Owners: []uint32{uint32(alice.uid), uint32(bob.uid)}}
	u, err = ReadUses(set, both)
	if err != nil || len(u.Records) != 2 || len(u.Skipped) != 0 {
		t.Fatalf("trusting bob too: %+v, %v", u, err)
	}
	if v := u.Units["u2"]; v.Time.After(time.Now().Add(useSkew)) {
		t.Errorf("a last use in 2099 counts as %v, not as now", v.Time)
	}
}
