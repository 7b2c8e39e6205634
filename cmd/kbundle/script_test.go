package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/internal/testutil/tree"
	"github.com/kbundle/kbundle/launcher"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary act as kbundle: testscript runs it under
// that name for the scripts' kbundle commands (in process: no separate
// build).
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"kbundle": func() { os.Exit(checkedRun(os.Args)) }})
}

// exitConvention is the status checkedRun gives a run that broke the
// stderr conventions, so that no script's expected status can match it.
const exitConvention = 99

// checkedRun is run plus the conventions every script relies on: every
// stderr line starts with "kbundle: " (or is urfave/cli's help text) and
// shows no internals (a temporary's name, a strconv error); a failure
// says something, in one line of what happened and at most one "hint:"
// line of what to do; and nothing panics.
func checkedRun(args []string) (code int) {
	var stderr bytes.Buffer
	defer func() {
		os.Stderr.Write(stderr.Bytes())
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "kbundle-test: panic: %v\n", p)
			code = exitConvention
		}
	}()
	code, msg := execute(args, os.Stdout, &stderr)
	if msg != "" {
		fmt.Fprintf(&stderr, "kbundle: %s\n", msg)
	}
	if bad := messageShape(msg); bad != "" {
		fmt.Fprintf(&stderr, "kbundle-test: the final message %s\n", bad)
		return exitConvention
	}
	for _, l := range strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, "kbundle: ") && !strings.HasPrefix(l, "   ") && !helpLine(l) {
			fmt.Fprintf(&stderr, "kbundle-test: stderr line %q does not start with \"kbundle: \"\n", l)
			return exitConvention
		}
		for _, internal := range []string{"kbundle-tmp-", "strconv."} {
			// pack names the temporaries it finds in DIR: the user's files.
			if strings.Contains(l, internal) && !strings.HasSuffix(l, ": a temporary of kbundle's") {
				fmt.Fprintf(&stderr, "kbundle-test: stderr line %q shows an internal detail (%s)\n", l, internal)
				return exitConvention
			}
		}
	}
	if code != 0 && !strings.Contains(stderr.String(), "kbundle: ") {
		fmt.Fprintf(&stderr, "kbundle-test: exit %d without a message\n", code)
		return exitConvention
	}
	return code
}

// messageShape says what is wrong with a final message ("" when nothing):
// one line of what happened, then at most one line of what to do, which
// starts with "hint: ".
func messageShape(msg string) string {
	lines := strings.Split(msg, "\n")
	switch {
	case len(lines) > 2:
		return fmt.Sprintf("has %d lines, want one and at most a hint", len(lines))
	case len(lines) == 2 && !strings.HasPrefix(lines[1], "kbundle: hint: "):
		return fmt.Sprintf("has a second line %q that is not a hint", lines[1])
	}
	return ""
}

// helpLine accepts the headings of the help text urfave/cli prints.
func helpLine(l string) bool {
	for _, p := range []string{"NAME:", "USAGE:", "OPTIONS:", "DESCRIPTION:", "COMMANDS:", "GLOBAL OPTIONS:", "VERSION:"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// TestScripts runs testdata/script/*.txt (testscript syntax; see
// scriptCmds for the commands added here). Each script starts in a fresh
// work directory holding the sample cache of cacheSpec in cache/, with
// HOME=$WORK and $REPO the module root. Scripts must assert, after every
// failure, which files and directories must NOT exist (absent GLOB...).
func TestScripts(t *testing.T) {
	deadline, _ := t.Deadline() // a hang fails the script, with its log, before go test kills everything
	// testscript removes its root folder only once every script has run:
	// with -run selecting some, it would stay behind.
	var root sync.Once
	testscript.Run(t, testscript.Params{
		Dir:      filepath.Join("testdata", "script"),
		Deadline: deadline,
		Setup: func(env *testscript.Env) error {
			// Another user must be able to enter the work directory
			// (as-other); testscript makes it and its parent private.
			root.Do(func() { t.Cleanup(func() { os.RemoveAll(filepath.Dir(env.WorkDir)) }) })
			for _, d := range []string{filepath.Dir(env.WorkDir), env.WorkDir} {
				if err := os.Chmod(d, 0o755); err != nil {
					return err
				}
			}
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("REPO", testutil.RepoRoot())
			return tree.WriteSpec(filepath.Join(env.WorkDir, "cache"), cacheSpec())
		},
		Condition: func(cond string) (bool, error) {
			if cond == "root" {
				return os.Geteuid() == 0, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: scriptCmds,
	})
}

// cacheSpec is the scripts' sample cache: nested directories, an empty
// file, duplicate content, an executable, a read-only file, an empty
// directory and nanosecond mtimes.
func cacheSpec() tree.Spec {
	ptx := strings.Repeat(".reg .f32 %r<12>;\n", 300)
	mt := func(i int) time.Time { return time.Unix(1700000000+int64(i), int64(i)*111111111+7) }
	dirTime := time.Unix(1600000000, 1)
	spec := tree.Spec{
		"triton/ab12/k.ptx":  {Data: ptx, Mode: 0o644, MTime: mt(0)},
		"triton/ab12/k.json": {Data: `{"name":"k","num_warps":4}`, Mode: 0o644, MTime: mt(1)},
		"triton/cd34/k.ptx":  {Data: ptx, Mode: 0o600, MTime: mt(2)},
		"triton/cd34/empty":  {Mode: 0o644, MTime: mt(3)},
		"numba/f.nbi":        {Data: "index", Mode: 0o444, MTime: mt(4)},
		"bin/run.so":         {Data: "\x7fELF\x02\x01\x01", Mode: 0o755, MTime: mt(5)},
		"empty-dir":          {Dir: true, Mode: 0o750, MTime: dirTime},
	}
	for _, d := range []string{"triton/ab12", "triton/cd34", "triton", "numba", "bin", "."} {
		spec[d] = tree.File{Dir: true, MTime: dirTime}
	}
	return spec
}

// scriptCmds are the commands the scripts add to testscript's own:
//
//	fail N kbundle ARGS...   run kbundle; it must exit with status N
//	as-other [fail N] kbundle ARGS...
//	                         run it as an unprivileged other user (root only)
//	json KEY VALUE           stdout is one JSON object whose KEY (a/b for
//	                         nested) prints as VALUE; VALUE * means present
//	json-keys KEY...         stdout is a JSON object with exactly these fields
//	absent GLOB...           nothing matches any GLOB
//	sametree A B             same names, kinds, modes, contents, ns mtimes
//	content PATH TEXT        PATH holds exactly TEXT (\n escapes)
//	write PATH TEXT          write TEXT (\n escapes) to PATH, mode 0644
//	append PATH TEXT         append TEXT (\n escapes) to PATH
//	truncate PATH N / flip PATH OFFSET
//	                         cut PATH to N bytes / flip a bit of the byte at
//	                         OFFSET (negative: from the end)
//	mkfifo PATH              make a named pipe
//	chown-other PATH         give PATH to the other user (root only)
//	envfile FILE             set the KEY=VALUE lines of FILE ('#' comments)
//	launcher-env VALUE       set every launcher variable kbundle knows to VALUE
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"fail": func(ts *testscript.TestScript, neg bool, args []string) {
		noNeg(ts, neg, "fail")
		runKbundle(ts, false, args)
	},
	"as-other": func(ts *testscript.TestScript, neg bool, args []string) {
		noNeg(ts, neg, "as-other")
		if len(args) > 0 && args[0] != "fail" {
			args = append([]string{"0"}, args...)
		} else if len(args) > 0 {
			args = args[1:]
		}
		runKbundle(ts, true, args)
	},
	"json": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 2, "json KEY VALUE")
		var v map[string]any
		dec := json.NewDecoder(strings.NewReader(ts.ReadFile("stdout")))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil || dec.More() {
			ts.Fatalf("stdout is not one JSON object: %v", err)
		}
		var cur any = v
		for _, k := range strings.Split(args[0], "/") {
			if l, ok := cur.([]any); ok {
				i, err := strconv.Atoi(k)
				if err != nil || i < 0 || i >= len(l) {
					ts.Fatalf("json %s: no element %s in a list of %d", args[0], k, len(l))
				}
				cur = l[i]
				continue
			}
			m, ok := cur.(map[string]any)
			if !ok {
				ts.Fatalf("json %s: not an object at %s", args[0], k)
			}
			if cur, ok = m[k]; !ok {
				ts.Fatalf("json: no field %s", args[0])
			}
		}
		if got := fmt.Sprint(cur); args[1] != "*" && got != args[1] {
			ts.Fatalf("json %s = %s, want %s", args[0], got, args[1])
		}
	},
	"json-keys": func(ts *testscript.TestScript, neg bool, args []string) {
		noNeg(ts, neg, "json-keys")
		var v map[string]any
		if err := json.Unmarshal([]byte(ts.ReadFile("stdout")), &v); err != nil {
			ts.Fatalf("stdout is not a JSON object: %v", err)
		}
		got := slices.Sorted(maps.Keys(v))
		if want := slices.Sorted(slices.Values(args)); !slices.Equal(got, want) {
			ts.Fatalf("JSON fields %q, want exactly %q", got, want)
		}
	},
	"absent": func(ts *testscript.TestScript, neg bool, args []string) {
		noNeg(ts, neg, "absent")
		for _, g := range args {
			m, err := filepath.Glob(ts.MkAbs(g))
			ts.Check(err)
			if len(m) > 0 {
				ts.Fatalf("%s exists: %v", g, m)
			}
		}
	},
	"sametree": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 2, "sametree A B")
		if d := tree.Diff(ts.MkAbs(args[0]), ts.MkAbs(args[1]), tree.Options{Mtimes: true}); d != "" {
			ts.Fatalf("trees differ:\n%s", d)
		}
	},
	"content": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 2, "content PATH TEXT")
		if got := ts.ReadFile(args[0]); got != unescape(args[1]) {
			ts.Fatalf("content of %s: %q, want %q", args[0], got, unescape(args[1]))
		}
	},
	"write": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 2, "write PATH TEXT")
		ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(unescape(args[1])), 0o644))
	},
	"append": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 2, "append PATH TEXT")
		f, err := os.OpenFile(ts.MkAbs(args[0]), os.O_WRONLY|os.O_APPEND, 0)
		ts.Check(err)
		_, err = f.WriteString(unescape(args[1]))
		ts.Check(err)
		ts.Check(f.Close())
	},
	"truncate": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 2, "truncate PATH N")
		p := ts.MkAbs(args[0])
		fi, err := os.Stat(p)
		ts.Check(err)
		n, err := strconv.ParseInt(args[1], 10, 64)
		ts.Check(err)
		if n < 0 {
			n += fi.Size()
		}
		if n < 0 || n > fi.Size() {
			ts.Fatalf("truncate %s to %d: it has %d bytes", args[0], n, fi.Size())
		}
		ts.Check(os.Truncate(p, n))
	},
	"flip": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 2, "flip PATH OFFSET")
		off, err := strconv.ParseInt(args[1], 10, 64)
		ts.Check(err)
		ts.Check(tree.FlipByte(ts.MkAbs(args[0]), off))
	},
	"mkfifo": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 1, "mkfifo PATH")
		ts.Check(syscall.Mkfifo(ts.MkAbs(args[0]), 0o600))
	},
	"chown-other": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 1, "chown-other PATH")
		uid, gid := otherUser(ts)
		ts.Check(os.Lchown(ts.MkAbs(args[0]), uid, gid))
	},
	"envfile": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 1, "envfile FILE")
		for line := range strings.Lines(ts.ReadFile(args[0])) {
			line = strings.TrimSuffix(line, "\n")
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				ts.Fatalf("%s: %q is not KEY=VALUE", args[0], line)
			}
			ts.Setenv(k, v)
		}
	},
	"launcher-env": func(ts *testscript.TestScript, neg bool, args []string) {
		want(ts, neg, args, 1, "launcher-env VALUE")
		for _, n := range launcher.Names() {
			ts.Setenv(n, args[0])
		}
	},
}

func noNeg(ts *testscript.TestScript, neg bool, name string) {
	if neg {
		ts.Fatalf("unsupported: ! %s", name)
	}
}

func want(ts *testscript.TestScript, neg bool, args []string, n int, usage string) {
	noNeg(ts, neg, strings.Fields(usage)[0])
	if len(args) != n {
		ts.Fatalf("usage: %s", usage)
	}
}

func unescape(s string) string { return strings.ReplaceAll(s, `\n`, "\n") }

// runKbundle runs "N kbundle ARGS..." and checks that kbundle exits with
// status N; asOther runs it as otherUser.
func runKbundle(ts *testscript.TestScript, asOther bool, args []string) {
	if len(args) < 2 || args[1] != "kbundle" {
		ts.Fatalf("usage: fail N kbundle ARGS...")
	}
	code, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("fail: bad exit status %q", args[0])
	}
	name, argv := "kbundle", args[2:]
	if asOther {
		uid, gid := otherUser(ts)
		argv = append([]string{"--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(gid), "--clear-groups", "--",
			sharedKbundle(ts)}, argv...)
		name = "setpriv"
	}
	err = ts.Exec(name, argv...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("%v", err)
	}
	if got != code {
		ts.Fatalf("kbundle %s: exit %d, want %d", strings.Join(args[2:], " "), got, code)
	}
}

// sharedKbundle copies the test binary, named kbundle so that it acts as
// kbundle, to where another user can run it ($WORK/.other/kbundle). cp(1)
// writes it: were this process to hold it open for writing, a script
// forking in parallel could inherit the descriptor and make exec fail
// with ETXTBSY.
func sharedKbundle(ts *testscript.TestScript) string {
	out := ts.MkAbs(".other/kbundle")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	self, err := os.Executable()
	ts.Check(err)
	ts.Check(os.MkdirAll(filepath.Dir(out), 0o755))
	if b, err := exec.Command("cp", self, out).CombinedOutput(); err != nil {
		ts.Fatalf("cp %s: %v: %s", self, err, b)
	}
	ts.Check(os.Chmod(out, 0o755))
	return out
}

const otherUserName = "kbundle-test-other"

var (
	otherOnce          sync.Once
	otherUID, otherGID int
	otherErr           error
)

// otherUser returns an unprivileged user that is not the current one,
// creating it with useradd. Only root can; scripts guard with [root].
func otherUser(ts *testscript.TestScript) (uid, gid int) {
	if os.Geteuid() != 0 {
		ts.Fatalf("needs root to create and switch to another user: guard the line with [root]")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		ts.Fatalf("setpriv not installed")
	}
	otherOnce.Do(func() {
		u, err := user.Lookup(otherUserName)
		if err != nil {
			out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", otherUserName).CombinedOutput()
			if err != nil {
				otherErr = fmt.Errorf("useradd: %v: %s", err, out)
				return
			}
			if u, err = user.Lookup(otherUserName); err != nil {
				otherErr = err
				return
			}
		}
		otherUID, _ = strconv.Atoi(u.Uid)
		otherGID, _ = strconv.Atoi(u.Gid)
	})
	if otherErr != nil {
		ts.Fatalf("cannot make another user: %v", otherErr)
	}
	return otherUID, otherGID
}

// TestVectors runs verify and extract, in process, on every committed
// test vector: valid ones succeed; every other exits 3 with a message
// naming the file and a hint, and extraction leaves neither the
// destination nor a temporary directory.
func TestVectors(t *testing.T) {
	dir := filepath.Join(testutil.RepoRoot(), "bundle", "testdata", "vectors")
	table, err := os.ReadFile(filepath.Join(dir, "vectors.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(table)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		file, outcome := f[0], f[1]
		n++
		t.Run(file, func(t *testing.T) {
			work := t.TempDir()
			t.Chdir(work)
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
			kb := func(args ...string) (string, int) {
				var so, se bytes.Buffer
				code := run(append([]string{"kbundle"}, args...), &so, &se)
				return se.String(), code
			}
			verr, vcode := kb("verify", "--deep", file)
			eerr, ecode := kb("extract", file, "dest")
			switch {
			case outcome == "ok":
				if vcode != 0 || ecode != 0 {
					t.Errorf("verify exit %d, extract exit %d, want 0\n%s%s", vcode, ecode, verr, eerr)
				}
				return
			case vcode != exitUnusable:
				t.Errorf("%s: verify exit %d, want 3\n%s", outcome, vcode, verr)
			case !strings.Contains(verr, "kbundle: "+file+": ") || !strings.Contains(verr, "kbundle: hint: "):
				t.Errorf("verify message does not name the file or lacks a hint:\n%s", verr)
			}
			if file == "file-digest-wrong.kbundle" { // contents are intact; extract checks those
				return
			}
			if ecode != exitUnusable {
				t.Errorf("%s: extract exit %d, want 3\n%s", outcome, ecode, eerr)
			}
			if left, _ := filepath.Glob("*dest*"); len(left) != 0 {
				t.Errorf("extract left %v", left)
			}
		})
	}
	if n < 50 {
		t.Fatalf("only %d vectors", n)
	}
}

// TestScriptsLint catches what testscript would accept silently but not
// mean: `! exists GLOB` (exists does not expand globs, so the assertion
// always holds: use absent), and $WORK or $REPO inside single quotes
// (not expanded there: close the quotes around them, or use ${WORK@R} in
// a regexp). Scripts written for the former runner made both mistakes.
func TestScriptsLint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "script", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "-- ") { // txtar files follow
				break
			}
			cmd := line
			for strings.HasPrefix(cmd, "[") && strings.Contains(cmd, "] ") {
				_, cmd, _ = strings.Cut(cmd, "] ")
			}
			if rest, ok := strings.CutPrefix(cmd, "! exists "); ok && strings.ContainsAny(rest, "*?[") {
				t.Errorf("%s:%d: ! exists does not expand globs: use absent %s", f, i+1, rest)
			}
			quoted := false
			for j := 0; j < len(cmd); j++ {
				switch {
				case cmd[j] == '\'':
					quoted = !quoted
				case quoted && cmd[j] == '$' && (strings.HasPrefix(cmd[j:], "$WORK") || strings.HasPrefix(cmd[j:], "$REPO") || strings.HasPrefix(cmd[j:], "${WORK") || strings.HasPrefix(cmd[j:], "${REPO")):
					t.Errorf("%s:%d: %s is not expanded inside single quotes", f, i+1, cmd[j:min(j+7, len(cmd))])
				}
			}
		}
	}
}
