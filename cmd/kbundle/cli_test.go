package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// TestCLIScripts runs the scripts in testdata/script/*.txt against the
// built kbundle binary, each in a fresh work directory holding a sample
// cache in cache/. The little language (one command a line, # comments):
//
//	kbundle ARGS...          run kbundle; it must exit 0
//	fail N kbundle ARGS...   run kbundle; it must exit N
//	as-other [fail N] kbundle ARGS...
//	                         run it as an unprivileged other user (root only)
//	stdout RE / stderr RE    the last run's output matches RE ((?m) mode)
//	! stdout RE / ! stderr RE
//	json KEY VALUE           the last stdout is JSON whose KEY (a/b for
//	                         nested) prints as VALUE; VALUE * means present
//	exists PATH... / ! exists GLOB...
//	samefile A B             same bytes
//	sametree A B             same names, kinds, modes, contents, mtimes
//	content PATH TEXT        PATH holds exactly TEXT (\n escapes)
//	mkdir PATH / write PATH TEXT / rm PATH / cp SRC DST / symlink OLD NEW
//	mkfifo PATH
//	chmod MODE PATH / truncate PATH N / flip PATH OFFSET / append PATH TEXT
//	                         (N and OFFSET count from the end when negative)
//	chown-other PATH         give PATH to the other user (root only)
//	env KEY=VALUE            set for later runs
//	[root] LINE / [!root] LINE
//	                         run LINE only as root / only as non-root
//
// $WORK in any argument is the work directory, $REPO the module root. Scripts must assert, after
// every failure, which files and directories must NOT exist.
func TestCLIScripts(t *testing.T) {
	kb := cliShareBinary(t, testutil.Kbundle(t, testutil.NoMPI))
	files, err := filepath.Glob(filepath.Join("testdata", "script", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s := &cliScript{t: t, kb: kb, work: cliWorkDir(t), file: f}
			s.env = []string{"HOME=" + s.work}
			cliFixture(t, filepath.Join(s.work, "cache"))
			s.run(string(src))
		})
	}
}

// cliWorkDir makes a work directory that another user can enter (mode
// 0755 under the system temporary directory, owned by us): the as-other
// commands need it; t.TempDir is private.
func cliWorkDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kbundle-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// cliShareBinary copies the built binary to a directory anyone can read,
// for the commands run as another user.
func cliShareBinary(t *testing.T, bin string) string {
	t.Helper()
	d := cliWorkDir(t)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(d, "kbundle")
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// cliFixture writes a small cache: nested directories, an empty file,
// duplicate content, an executable, a read-only file, nanosecond mtimes.
func cliFixture(t *testing.T, dir string) {
	t.Helper()
	ptx := strings.Repeat(".reg .f32 %r<12>;\n", 300)
	files := []struct {
		name string
		mode fs.FileMode
		data string
	}{
		{"triton/ab12/k.ptx", 0o644, ptx},
		{"triton/ab12/k.json", 0o644, `{"name":"k","num_warps":4}`},
		{"triton/cd34/k.ptx", 0o600, ptx},
		{"triton/cd34/empty", 0o644, ""},
		{"numba/f.nbi", 0o444, "index"},
		{"bin/run.so", 0o755, "\x7fELF\x02\x01\x01"},
	}
	for i, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		mt := time.Unix(1700000000+int64(i), int64(i)*111111111+7)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "empty-dir"), 0o750); err != nil {
		t.Fatal(err)
	}
	// Directories too, or the content time would be today's.
	for _, d := range []string{"triton/ab12", "triton/cd34", "triton", "numba", "bin", "empty-dir", "."} {
		mt := time.Unix(1600000000, 1)
		if err := os.Chtimes(filepath.Join(dir, d), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
}

type cliScript struct {
	t              *testing.T
	kb, work, file string
	env            []string
	lineNo         int
	stdout, stderr string
}

func (s *cliScript) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("%s:%d: %s\nlast stdout:\n%s\nlast stderr:\n%s", s.file, s.lineNo, fmt.Sprintf(format, args...), s.stdout, s.stderr)
}

func (s *cliScript) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.work, p)
}

func (s *cliScript) run(src string) {
	for i, line := range strings.Split(src, "\n") {
		s.lineNo = i + 1
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "[root] "); ok {
			if os.Geteuid() != 0 {
				continue
			}
			line = rest
		} else if rest, ok := strings.CutPrefix(line, "[!root] "); ok {
			if os.Geteuid() == 0 {
				continue
			}
			line = rest
		}
		s.line(line)
	}
}

func (s *cliScript) line(line string) {
	s.t.Helper()
	neg := false
	if rest, ok := strings.CutPrefix(line, "! "); ok {
		neg, line = true, rest
	}
	line = strings.ReplaceAll(line, "$REPO", testutil.RepoRoot())
	args := cliFields(strings.ReplaceAll(line, "$WORK", s.work))
	cmd, args := args[0], args[1:]
	want := func(n int) {
		if len(args) != n {
			s.fatalf("%s takes %d arguments", cmd, n)
		}
	}
	switch cmd {
	case "kbundle", "fail", "as-other":
		other := cmd == "as-other"
		if other {
			cmd, args = args[0], args[1:]
		}
		code := 0
		if cmd == "fail" {
			n, err := strconv.Atoi(args[0])
			if err != nil {
				s.fatalf("fail needs an exit code")
			}
			code, cmd, args = n, args[1], args[2:]
		}
		if cmd != "kbundle" {
			s.fatalf("only kbundle can be run")
		}
		s.exec(code, other, args)
	case "stdout", "stderr":
		want(1)
		out := s.stdout
		if cmd == "stderr" {
			out = s.stderr
		}
		re, err := regexp.Compile("(?m)" + args[0])
		if err != nil {
			s.fatalf("bad regexp: %v", err)
		}
		if re.MatchString(out) == neg {
			s.fatalf("%s %s %q", map[bool]string{true: "unexpected", false: "no match for"}[neg], cmd, args[0])
		}
	case "json":
		want(2)
		var v map[string]any
		dec := json.NewDecoder(strings.NewReader(s.stdout))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil || dec.More() {
			s.fatalf("stdout is not one JSON object: %v", err)
		}
		var cur any = v
		for _, k := range strings.Split(args[0], "/") {
			m, ok := cur.(map[string]any)
			if !ok {
				s.fatalf("json %s: not an object at %s", args[0], k)
			}
			if cur, ok = m[k]; !ok {
				s.fatalf("json: no field %s", args[0])
			}
		}
		if got := fmt.Sprint(cur); args[1] != "*" && got != args[1] {
			s.fatalf("json %s = %s, want %s", args[0], got, args[1])
		}
	case "exists":
		for _, p := range args {
			m, _ := filepath.Glob(s.path(p))
			if neg && len(m) > 0 {
				s.fatalf("%s exists: %v", p, m)
			}
			if !neg {
				if _, err := os.Lstat(s.path(p)); err != nil {
					s.fatalf("%s does not exist", p)
				}
			}
		}
	case "samefile":
		want(2)
		a, err1 := os.ReadFile(s.path(args[0]))
		b, err2 := os.ReadFile(s.path(args[1]))
		if err1 != nil || err2 != nil || bytes.Equal(a, b) == neg {
			s.fatalf("samefile %s %s: %v %v", args[0], args[1], err1, err2)
		}
	case "sametree":
		want(2)
		if d := cliTreeDiff(s.path(args[0]), s.path(args[1])); d != "" {
			s.fatalf("trees differ: %s", d)
		}
	case "content":
		want(2)
		b, err := os.ReadFile(s.path(args[0]))
		if err != nil || string(b) != cliUnescape(args[1]) {
			s.fatalf("content of %s: %q %v", args[0], b, err)
		}
	case "mkdir":
		want(1)
		s.check(os.MkdirAll(s.path(args[0]), 0o755))
	case "write", "append":
		want(2)
		flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if cmd == "append" {
			flag = os.O_WRONLY | os.O_APPEND
		}
		f, err := os.OpenFile(s.path(args[0]), flag, 0o644)
		s.check(err)
		_, err = f.WriteString(cliUnescape(args[1]))
		s.check(err)
		s.check(f.Close())
	case "rm":
		want(1)
		s.check(os.RemoveAll(s.path(args[0])))
	case "cp":
		want(2)
		b, err := os.ReadFile(s.path(args[0]))
		s.check(err)
		s.check(os.WriteFile(s.path(args[1]), b, 0o644))
		s.check(os.Chmod(s.path(args[1]), 0o644))
	case "mkfifo":
		want(1)
		s.check(syscall.Mkfifo(s.path(args[0]), 0o600))
	case "symlink":
		want(2)
		s.check(os.Symlink(args[0], s.path(args[1])))
	case "chmod":
		want(2)
		m, err := strconv.ParseUint(args[0], 8, 32)
		s.check(err)
		s.check(os.Chmod(s.path(args[1]), fs.FileMode(m)))
	case "truncate", "flip":
		want(2)
		p := s.path(args[0])
		b, err := os.ReadFile(p)
		s.check(err)
		k, err := strconv.Atoi(args[1])
		s.check(err)
		if k < 0 {
			k += len(b)
		}
		if k < 0 || k > len(b) || (cmd == "flip" && k == len(b)) {
			s.fatalf("%s: offset %d outside %d bytes", cmd, k, len(b))
		}
		if cmd == "truncate" {
			b = b[:k]
		} else {
			b[k] ^= 0x10
		}
		s.check(os.WriteFile(p, b, 0o644))
	case "chown-other":
		want(1)
		uid, gid := cliOtherUser(s.t)
		s.check(os.Lchown(s.path(args[0]), uid, gid))
	case "env":
		want(1)
		s.env = append(s.env, args[0])
	default:
		s.fatalf("unknown command %q", cmd)
	}
}

func (s *cliScript) check(err error) {
	s.t.Helper()
	if err != nil {
		s.fatalf("%v", err)
	}
}

// exec runs kbundle with args in the work directory and checks the exit
// code and the stderr conventions: every line starts with "kbundle: ",
// and a failure says something.
func (s *cliScript) exec(code int, asOther bool, args []string) {
	s.t.Helper()
	argv := append([]string{s.kb}, args...)
	var env []string
	if asOther {
		uid, _ := cliOtherUser(s.t)
		// setpriv drops to the other user for this one command.
		argv = append([]string{"setpriv", "--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(uid), "--clear-groups", "--"}, argv...)
		if _, err := exec.LookPath("setpriv"); err != nil {
			s.t.Skip("setpriv not installed")
		}
	}
	env = append(env, s.env...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.work
	cmd.Env = append(cliBaseEnv(), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		s.fatalf("%v", err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		s.fatalf("kbundle %v: timed out (a hang is a failure)", args)
	}
	s.stdout, s.stderr = so.String(), se.String()
	got := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			s.fatalf("%v", err)
		}
		got = ee.ExitCode()
	}
	if got != code {
		s.fatalf("kbundle %s: exit %d, want %d", strings.Join(args, " "), got, code)
	}
	for _, l := range strings.Split(strings.TrimRight(s.stderr, "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, "kbundle: ") && !strings.HasPrefix(l, "   ") && !cliUsageLine(l) {
			s.fatalf("stderr line %q does not start with \"kbundle: \"", l)
		}
	}
	if code != 0 && !strings.Contains(s.stderr, "kbundle: ") {
		s.fatalf("failed without a message")
	}
	if strings.Contains(s.stderr, "panic") || strings.Contains(s.stderr, "goroutine ") {
		s.fatalf("panicked")
	}
}

// cliBaseEnv is the test's environment without kbundle's variables and
// SOURCE_DATE_EPOCH, so that the scripts start from the defaults.
func cliBaseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KBUNDLE_") && !strings.HasPrefix(kv, "SOURCE_DATE_EPOCH=") {
			env = append(env, kv)
		}
	}
	return env
}

// cliUsageLine accepts the help text urfave/cli prints on a usage error.
func cliUsageLine(l string) bool {
	for _, p := range []string{"NAME:", "USAGE:", "OPTIONS:", "DESCRIPTION:", "COMMANDS:", "GLOBAL OPTIONS:", "Incorrect Usage"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// cliFields splits a script line into words; 'single quotes' group.
func cliFields(line string) []string {
	var out []string
	var cur strings.Builder
	in, any := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			in, any = !in, true
		case (r == ' ' || r == '\t') && !in:
			if any {
				out = append(out, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}

func cliUnescape(s string) string { return strings.ReplaceAll(s, `\n`, "\n") }

// cliTreeDiff compares two trees: names, kinds, permission bits, contents
// and nanosecond mtimes. It returns "" when they match.
func cliTreeDiff(a, b string) string {
	type info struct {
		mode  fs.FileMode
		mtime time.Time
		data  string
	}
	read := func(root string) (map[string]info, error) {
		m := map[string]info{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == root {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if rel == bundle.InstalledMarker {
				return nil // kbundle's mark on a tree it extracted
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			in := info{mode: fi.Mode() &^ 0o022, mtime: fi.ModTime()} // extraction drops group/other write
			if fi.Mode().IsRegular() {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				in.data = string(b)
			}
			m[rel] = in
			return nil
		})
		return m, err
	}
	ma, err := read(a)
	if err != nil {
		return err.Error()
	}
	mb, err := read(b)
	if err != nil {
		return err.Error()
	}
	if len(ma) != len(mb) {
		return fmt.Sprintf("%d vs %d entries", len(ma), len(mb))
	}
	for k, va := range ma {
		vb, ok := mb[k]
		if !ok {
			return k + " missing"
		}
		if va.mode != vb.mode || !va.mtime.Equal(vb.mtime) || va.data != vb.data {
			return fmt.Sprintf("%s: %v %v vs %v %v", k, va.mode, va.mtime, vb.mode, vb.mtime)
		}
	}
	return ""
}

const cliOtherUserName = "kbundle-test-other"

var (
	otherOnce          sync.Once
	otherUID, otherGID int
	otherErr           error
)

// cliOtherUser returns an unprivileged user that is not the current one,
// creating it with useradd (root only). Without root it skips the test.
func cliOtherUser(t *testing.T) (uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create and switch to another user")
	}
	otherOnce.Do(func() {
		u, err := user.Lookup(cliOtherUserName)
		if err != nil {
			out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", cliOtherUserName).CombinedOutput()
			if err != nil {
				otherErr = fmt.Errorf("useradd: %v: %s", err, out)
				return
			}
			if u, err = user.Lookup(cliOtherUserName); err != nil {
				otherErr = err
				return
			}
		}
		otherUID, _ = strconv.Atoi(u.Uid)
		otherGID, _ = strconv.Atoi(u.Gid)
	})
	if otherErr != nil {
		t.Skipf("cannot make another user: %v", otherErr)
	}
	return otherUID, otherGID
}

// TestCLIVectors runs verify and extract on every committed test vector:
// valid ones succeed; every other exits 3 with a message naming the file
// and a hint, and extraction leaves neither the destination nor a
// temporary directory.
func TestCLIVectors(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	dir := filepath.Join(testutil.RepoRoot(), "bundle", "testdata", "vectors")
	table, err := os.ReadFile(filepath.Join(dir, "vectors.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(table), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		file, outcome := f[0], f[1]
		n++
		work := t.TempDir()
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, file), b, 0o600); err != nil {
			t.Fatal(err)
		}
		run := func(args ...string) (string, int) {
			cmd := exec.Command(kb, args...)
			cmd.Dir = work
			cmd.Env = cliBaseEnv()
			var se bytes.Buffer
			cmd.Stderr = &se
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return se.String(), code
		}
		verr, vcode := run("verify", "--deep", file)
		eerr, ecode := run("extract", file, "dest")
		switch {
		case outcome == "ok":
			if vcode != 0 || ecode != 0 {
				t.Errorf("%s: verify exit %d, extract exit %d, want 0\n%s%s", file, vcode, ecode, verr, eerr)
			}
			continue
		case vcode != exitUnusable:
			t.Errorf("%s (%s): verify exit %d, want 3\n%s", file, outcome, vcode, verr)
		case !strings.Contains(verr, "kbundle: "+file+": ") || !strings.Contains(verr, "kbundle: hint: "):
			t.Errorf("%s: verify message does not name the file or lacks a hint:\n%s", file, verr)
		}
		if file == "file-digest-wrong.kbundle" { // contents are intact; extract checks those
			continue
		}
		if ecode != exitUnusable {
			t.Errorf("%s (%s): extract exit %d, want 3\n%s", file, outcome, ecode, eerr)
		}
		if left, _ := filepath.Glob(filepath.Join(work, "*dest*")); len(left) != 0 {
			t.Errorf("%s: extract left %v", file, left)
		}
	}
	if n < 50 {
		t.Fatalf("only %d vectors", n)
	}
}
