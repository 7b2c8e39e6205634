package bundle

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
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
	if err := CheckTrust(file); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), proj+": untrusted: directory mode 0775") {
		t.Fatalf("group-writable ancestor: %v, want ErrUntrusted naming %s", err, proj)
	}
	os.Chmod(proj, 0o755)
	if err := CheckTrust(file); err != nil {
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
		f, err := OpenTrusted(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		f.Close()
	}
	// A symlink leading through an untrusted directory is refused.
	os.Chmod(proj, 0o777)
	if err := CheckTrust(filepath.Join(link, "b.kbundle")); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("symlink through a world-writable directory: %v", err)
	}
	os.Chmod(proj, 0o755)
	// Loops end.
	loop := filepath.Join(base, "loop")
	os.Symlink("loop", loop)
	if err := CheckTrust(loop); !errors.Is(err, unix.ELOOP) {
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
		err := CheckTrust(filepath.Join(other, "b.kbundle"))
		if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "symlink is owned by uid 65534") {
			t.Fatalf("%v, want ErrUntrusted naming the symlink's owner", err)
		}
	})
}

// TestTrustPolicy: KBUNDLE_TRUSTED_OWNERS and KBUNDLE_TRUSTED_GROUPS are
// the explicit opt-in for shared bundles; off by default.
func TestTrustPolicy(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	def, err := readPolicy(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, err := readPolicy(env(map[string]string{"KBUNDLE_TRUSTED_OWNERS": "root, 4242", "KBUNDLE_TRUSTED_GROUPS": "4343,root"}))
	if err != nil {
		t.Fatal(err)
	}
	if !p.owners[4242] || !p.owners[0] || !p.groups[4343] || !p.groups[0] {
		t.Fatalf("policy %+v", p)
	}
	if _, err := readPolicy(env(map[string]string{"KBUNDLE_TRUSTED_GROUPS": "no-such-group-kbundle"})); err == nil ||
		!strings.Contains(err.Error(), "KBUNDLE_TRUSTED_GROUPS") {
		t.Fatalf("unknown group: %v", err)
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
		f, err := OpenTrusted(filepath.Join(a, "b.kbundle"))
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
