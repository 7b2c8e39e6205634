package mpi

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// Two real users of one team group, made with groupadd and useradd.
const (
	teamGroup = "kbundle-test-team"
	userAlice = "kbundle-test-alice"
	userBob   = "kbundle-test-bob"
)

// teamUsers makes (once) the group and its two members and returns their
// uids.
func teamUsers(t *testing.T) (alice, bob int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make two users and run kbundle as each")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not installed (util-linux)")
	}
	if _, err := user.LookupGroup(teamGroup); err != nil {
		if out, err := exec.Command("groupadd", "--system", teamGroup).CombinedOutput(); err != nil {
			t.Fatalf("groupadd: %v\n%s", err, out)
		}
	}
	var uids []int
	for _, name := range []string{userAlice, userBob} {
		if _, err := user.Lookup(name); err != nil {
			if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "-G", teamGroup, name).CombinedOutput(); err != nil {
				t.Fatalf("useradd: %v\n%s", err, out)
			}
		} else if out, err := exec.Command("usermod", "-aG", teamGroup, name).CombinedOutput(); err != nil {
			t.Fatalf("usermod: %v\n%s", err, out)
		}
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		uids = append(uids, uid)
	}
	return uids[0], uids[1]
}

// TestHarvestSharedSet (issue 17): a team set in a setgid group
// directory, a base by one user and layers by another. Each user's
// harvest adds its layer (the layer directory is made group-writable and
// setgid, so the other can add to it); each user's load refuses the
// other's bundles until told to trust them, naming the bundle (or its
// directory) and the variable that fixes it: KBUNDLE_TRUSTED_GROUPS for
// the group-writable directory, KBUNDLE_TRUSTED_OWNERS for a file or
// directory the other user owns (a layer, the layer directory); with
// both, each loads the whole set.
func TestHarvestSharedSet(t *testing.T) {
	alice, bob := teamUsers(t)
	v := testutil.OpenMPI
	kb := testutil.Kbundle(t, v)
	for d := filepath.Dir(kb); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // the users run the test build
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755) // t.TempDir's own folder is 0700
	os.Chmod(base, 0o755)
	team := filepath.Join(base, "team")
	g, _ := user.LookupGroup(teamGroup)
	gid, _ := strconv.Atoi(g.Gid)
	if err := os.Mkdir(team, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(team, 0, gid)
	if err := os.Chmod(team, 0o775|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	set := filepath.Join(team, "cache.kbundle")
	home := map[int]string{}
	for _, uid := range []int{alice, bob} {
		home[uid] = filepath.Join(base, strconv.Itoa(uid))
		os.Mkdir(home[uid], 0o700)
		os.Chown(home[uid], uid, -1)
	}
	// as runs kbundle ARGS as uid under mpirun (np 2, two fake nodes).
	as := func(uid int, env []string, args ...string) (string, int) {
		t.Helper()
		u, _ := user.LookupId(strconv.Itoa(uid))
		argv := []string{"setpriv", "--reuid", u.Uid, "--regid", u.Gid, "--init-groups", "--",
			testutil.Launcher(v), "-np", "2", "--oversubscribe", kb}
		env = append([]string{"HOME=" + home[uid], "TMPDIR=" + home[uid], "KBUNDLE_TEST_RANKS_PER_NODE=1"}, env...)
		_, se, code := testutil.Run(t, append(testutil.MPIEnv, env...), append(argv, args...)...)
		return se, code
	}
	groups := "KBUNDLE_TRUSTED_GROUPS=" + teamGroup
	load := func(uid int, job string, env ...string) (dest, stderr string, code int) {
		dest = filepath.Join(home[uid], job)
		stderr, code = as(uid, env, "load", "-q", "--allow-missing", "--bundle", set, "--to", dest)
		return dest, stderr, code
	}
	harvest := func(uid int, dest string, env ...string) {
		t.Helper()
		if se, code := as(uid, env, "harvest", "--bundle", set, "--to", dest); code != 0 {
			t.Fatalf("uid %d: harvest: exit %d\n%s", uid, code, se)
		}
	}
	compile := func(uid int, dest, name string) {
		t.Helper()
		p := filepath.Join(dest+".node1", name)
		writeFile(t, p, []byte("compiled by "+strconv.Itoa(uid)))
		os.Chown(filepath.Dir(p), uid, -1)
		os.Chown(p, uid, -1)
	}
	// refused runs a load that must fail with exit 3 and say each of want.
	refused := func(uid int, job string, want []string, env ...string) {
		t.Helper()
		_, se, code := load(uid, job, env...)
		for _, w := range want {
			if !strings.Contains(se, w) {
				t.Errorf("uid %d, %q: exit %d, want 3 and %q said\n%s", uid, env, code, w, se)
			}
		}
		if code != 3 {
			t.Errorf("uid %d, %q: exit %d, want 3\n%s", uid, env, code, se)
		} else {
			t.Logf("uid %d, %q: %s", uid, env, firstLine(se, "untrusted"))
		}
	}
	has := func(uid int, dest string, names ...string) {
		t.Helper()
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(dest+".node0", n)); err != nil {
				t.Errorf("uid %d: the load lacks %s: %v", uid, n, err)
			}
		}
	}

	// Alice's first job writes the base.
	d, se, code := load(alice, "a1", groups)
	if code != 0 {
		t.Fatalf("alice: load --allow-missing: exit %d\n%s", code, se)
	}
	compile(alice, d, "alice/a.bin")
	harvest(alice, d, groups)

	// Bob needs the group (the directory) and Alice (her base).
	refused(bob, "b0", []string{team, "KBUNDLE_TRUSTED_GROUPS=" + teamGroup})
	refused(bob, "b0", []string{set, "KBUNDLE_TRUSTED_OWNERS=" + userAlice}, groups)
	bobTrust := []string{groups, "KBUNDLE_TRUSTED_OWNERS=" + userAlice}
	d, se, code = load(bob, "b1", bobTrust...)
	if code != 0 {
		t.Fatalf("bob: load: exit %d\n%s", code, se)
	}
	compile(bob, d, "bob/b.bin")
	harvest(bob, d, bobTrust...)
	if fi, err := os.Stat(set + ".d"); err != nil || fi.Mode()&0o020 == 0 || fi.Mode()&os.ModeSetgid == 0 {
		t.Fatalf("%s.d: %v, %v; want group-writable and setgid", set, fi.Mode(), err)
	}

	// Alice now needs Bob too (his layer and the layer directory he made).
	refused(alice, "a2", []string{set + ".d", "KBUNDLE_TRUSTED_OWNERS=" + userBob}, groups)
	aliceTrust := []string{groups, "KBUNDLE_TRUSTED_OWNERS=" + userBob}
	d, se, code = load(alice, "a3", aliceTrust...)
	if code != 0 {
		t.Fatalf("alice: load with both: exit %d\n%s", code, se)
	}
	has(alice, d, "alice/a.bin", "bob/b.bin")
	compile(alice, d, "alice/a2.bin")
	harvest(alice, d, aliceTrust...) // a layer in Bob's layer directory

	d, se, code = load(bob, "b2", bobTrust...)
	if code != 0 {
		t.Fatalf("bob: load of three bundles: exit %d\n%s", code, se)
	}
	has(bob, d, "alice/a.bin", "bob/b.bin", "alice/a2.bin")
	layers, _ := filepath.Glob(set + ".d/*.kbundle")
	if len(layers) != 2 {
		t.Fatalf("layers %q, want Bob's and Alice's", layers)
	}

	// A layer directory the team's administrator made (root's): then the
	// refusal names Bob's layer itself.
	os.Chown(set+".d", 0, gid)
	refused(alice, "a4", []string{layers[0], "file is owned by " + userBob, "KBUNDLE_TRUSTED_OWNERS=" + userBob}, groups)
}

// firstLine is the first line of s holding w.
func firstLine(s, w string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, w) {
			return l
		}
	}
	return ""
}
