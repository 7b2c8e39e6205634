package bundle

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTrustAncestors: every directory on the way to the bundle is checked,
// not only the one holding it (W2), and symlink components are followed
// only when their owner is trusted.
func TestTrustAncestors(t *testing.T) {
	data := vector(t, "valid-basic")
	base := t.TempDir()
	mk := func(rel string, mode os.FileMode) string {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	proj := mk("proj", 0o775) // a group-writable project directory
	mk("proj/victim", 0o755)
	file := filepath.Join(proj, "victim", "b.kbundle")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckTrust(file, nil); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), proj+": untrusted: directory mode 0775") {
		t.Fatalf("group-writable ancestor: %v, want ErrUntrusted naming %s", err, proj)
	}
	os.Chmod(proj, 0o755)
	if err := CheckTrust(file, nil); err != nil {
		t.Fatalf("private chain: %v", err)
	}

	// Our own symlink to a trusted place is followed, relative or absolute.
	link := filepath.Join(base, "link")
	os.Symlink("proj/victim", link)
	abslink := filepath.Join(base, "abslink")
	os.Symlink(filepath.Join(proj, "victim"), abslink)
	dotlink := filepath.Join(base, "dotlink")
	os.Symlink("proj/../proj/./victim/b.kbundle", dotlink)
	for _, p := range []string{filepath.Join(link, "b.kbundle"), filepath.Join(abslink, "b.kbundle"), dotlink} {
		f, err := OpenTrusted(p, nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		f.Close()
	}
	// A symlink leading through an untrusted directory is refused.
	os.Chmod(proj, 0o777)
	if err := CheckTrust(filepath.Join(link, "b.kbundle"), nil); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("symlink through a world-writable directory: %v", err)
	}
	os.Chmod(proj, 0o755)
	// Loops end.
	loop := filepath.Join(base, "loop")
	os.Symlink("loop", loop)
	if err := CheckTrust(loop, nil); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("symlink loop: %v, want ELOOP", err)
	}

	t.Run("symlink owned by someone else", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a symlink away")
		}
		other := filepath.Join(base, "other")
		os.Symlink("proj/victim", other)
		if err := os.Lchown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		err := CheckTrust(filepath.Join(other, "b.kbundle"), nil)
		if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "symlink is owned by nobody (uid 65534), not by you") {
			t.Fatalf("%v, want ErrUntrusted naming the symlink's owner", err)
		}
	})
}

// TestTrustPolicy: the trusted owners and groups (KBUNDLE_TRUSTED_OWNERS
// and KBUNDLE_TRUSTED_GROUPS, parsed by ParseTrust) are the explicit
// opt-in for shared bundles; off by default (a nil policy).
func TestTrustPolicy(t *testing.T) {
	var def *TrustPolicy
	p, err := ParseTrust("4343,root", "root, 4242")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Owners, []uint32{0, 4242}) || !slices.Equal(p.Groups, []uint32{4343, 0}) {
		t.Fatalf("policy %+v", p)
	}
	if p, err := ParseTrust("", ""); err != nil || len(p.Owners)+len(p.Groups) != 0 {
		t.Fatalf("empty: %+v, %v", p, err)
	}
	for _, c := range []struct{ groups, owners, want string }{
		{"no-such-group-kbundle", "", `KBUNDLE_TRUSTED_GROUPS: "no-such-group-kbundle" is not a known name or a number`},
		{"", "root,no-such-user-kbundle", `KBUNDLE_TRUSTED_OWNERS: "no-such-user-kbundle" is not a known name or a number`},
		{"99999999999", "", `KBUNDLE_TRUSTED_GROUPS: "99999999999"`},
	} {
		if _, err := ParseTrust(c.groups, c.owners); !errors.Is(err, ErrTrustPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTrust(%q, %q): %v, want ErrTrustPolicy with %q", c.groups, c.owners, err, c.want)
		}
	}
	me := uint32(os.Getuid())
	other := me + 4242
	if me == 0 {
		other = 4242
	}
	for _, c := range []struct {
		name    string
		st      unix.Stat_t
		def, op bool // accepted by default, by p
	}{
		{"mine 0644", unix.Stat_t{Uid: me, Mode: unix.S_IFREG | 0o644}, true, true},
		{"mine 0664 group 4343", unix.Stat_t{Uid: me, Gid: 4343, Mode: unix.S_IFREG | 0o664}, false, true},
		{"mine 0664 group 1", unix.Stat_t{Uid: me, Gid: 1, Mode: unix.S_IFREG | 0o664}, false, false},
		{"mine 0666 group 4343", unix.Stat_t{Uid: me, Gid: 4343, Mode: unix.S_IFREG | 0o666}, false, false},
		{"service account 4242", unix.Stat_t{Uid: 4242, Mode: unix.S_IFREG | 0o644}, me == 4242, true},
		{"another user", unix.Stat_t{Uid: other + 1, Mode: unix.S_IFREG | 0o644}, false, false},
		{"root sticky 1777 dir", unix.Stat_t{Uid: 0, Mode: unix.S_IFDIR | unix.S_ISVTX | 0o777}, true, true},
		{"sticky 1777 dir of another user", unix.Stat_t{Uid: other + 1, Mode: unix.S_IFDIR | unix.S_ISVTX | 0o777}, false, false},
		{"root 2775 group 4343 dir", unix.Stat_t{Uid: 0, Gid: 4343, Mode: unix.S_IFDIR | unix.S_ISGID | 0o775}, false, true},
		{"symlink of another user", unix.Stat_t{Uid: other + 1, Mode: unix.S_IFLNK | 0o777}, false, false},
		{"my symlink", unix.Stat_t{Uid: me, Mode: unix.S_IFLNK | 0o777}, true, true},
	} {
		st := c.st
		if got := def.statProblem("x", "x", &st) == ""; got != c.def {
			t.Errorf("%s: default policy accepts=%v, want %v", c.name, got, c.def)
		}
		if got := p.statProblem("x", "x", &st) == ""; got != c.op {
			t.Errorf("%s: opt-in policy accepts=%v, want %v", c.name, got, c.op)
		}
	}
}

// TestTrustRace is the scenario of review finding B1: while the file is
// checked and opened, another process keeps exchanging the directory that
// holds a good bundle with one that holds an untrusted one (mode 0666).
// A check by path followed by an open by path sometimes returned the
// other bundle; OpenTrusted must return the good bundle or refuse, never
// the other one.
func TestTrustRace(t *testing.T) {
	good, bad := vector(t, "valid-basic"), vector(t, "valid-two-segments")
	base := t.TempDir()
	for _, d := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{"victim", good, 0o644}, {"atk", bad, 0o666}} {
		os.Mkdir(filepath.Join(base, d.name), 0o755)
		p := filepath.Join(base, d.name, "b.kbundle")
		os.WriteFile(p, d.data, 0o600)
		os.Chmod(p, d.mode)
	}
	a, b := filepath.Join(base, "victim"), filepath.Join(base, "atk")
	stopSwapping := swapping(a, b)
	var goodN, refused int
	for i := 0; i < 3000; i++ {
		f, err := OpenTrusted(filepath.Join(a, "b.kbundle"), nil)
		if err != nil {
			refused++
			continue
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if !bytes.Equal(got, good) {
			stopSwapping()
			t.Fatalf("try %d: OpenTrusted returned the untrusted bundle", i)
		}
		goodN++
	}
	swaps := stopSwapping()
	t.Logf("3000 opens during %d swaps: %d good, %d refused, 0 other", swaps, goodN, refused)
	if swaps == 0 {
		t.Skip("the kernel does not support RENAME_EXCHANGE here")
	}
}

// swapping exchanges the paths a and b (RENAME_EXCHANGE) over and over in
// a goroutine, as an attacker racing a check would, until the returned
// stop is called; stop returns how many swaps succeeded (0: the kernel
// cannot exchange here).
func swapping(a, b string) (stop func() int) {
	var end atomic.Bool
	done := make(chan int)
	go func() {
		n := 0
		for !end.Load() {
			if unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE) == nil {
				n++
			}
		}
		done <- n
	}()
	return func() int {
		end.Store(true)
		return <-done
	}
}

// TestTrustMessages is U9 of the 2026-12-01 usability review: the message
// names the real mode (setgid and sticky bits included) and the owner by
// name and uid, and gives one fix that fits who owns the object.
func TestTrustMessages(t *testing.T) {
	me := uint32(os.Getuid())
	svc := uint32(4242) // a trusted owner: not you, yet accepted as owner
	if me == svc {
		svc = 4243
	}
	stranger := uint32(65534)
	p := &TrustPolicy{Owners: []uint32{svc}}
	for _, c := range []struct {
		name string
		st   unix.Stat_t
		want string
	}{
		{"your group-writable setgid directory", unix.Stat_t{Uid: me, Gid: 4343, Mode: unix.S_IFDIR | unix.S_ISGID | 0o775},
			"directory mode 2775 lets group " + groupName(4343) + " write it; run: chmod g-w /p"},
		{"your world-writable file", unix.Stat_t{Uid: me, Mode: unix.S_IFREG | 0o646}, "file mode 0646 lets others write it; run: chmod o-w /p"},
		{"your 0666 file", unix.Stat_t{Uid: me, Mode: unix.S_IFREG | 0o666}, "file mode 0666 lets others write it; run: chmod go-w /p"},
		{"project directory you do not own", unix.Stat_t{Uid: svc, Gid: 4343, Mode: unix.S_IFDIR | unix.S_ISGID | 0o775},
			"directory mode 2775 lets group " + groupName(4343) + " write it; you do not own it: use a directory of your own, " +
				"or trust the group with KBUNDLE_TRUSTED_GROUPS=" + groupArg(4343)},
		{"world-writable directory you do not own", unix.Stat_t{Uid: svc, Mode: unix.S_IFDIR | 0o777},
			"directory mode 0777 lets others write it; you do not own it: use a directory of your own"},
		{"another user's file", unix.Stat_t{Uid: stranger, Mode: unix.S_IFREG | 0o644},
			"file is owned by " + ownerName(stranger) + ", not by you"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := p.statProblem(strings.Fields(c.want)[0], "/p", &c.st)
			if !strings.HasPrefix(got, c.want) {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
			if strings.Contains(got, "chmod") && c.st.Uid != me {
				t.Errorf("%q: tells to chmod what you do not own", got)
			}
		})
	}
	if got := p.statProblem("file", "/p", &unix.Stat_t{Uid: stranger, Mode: unix.S_IFREG | 0o644}); !strings.HasSuffix(got,
		"; copy it to a directory of your own, or trust its owner with KBUNDLE_TRUSTED_OWNERS="+userArg(stranger)) {
		t.Errorf("owner fix: %q", got)
	}
}
