package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// pbsEnv is the environment PBS Pro gives a batch job, as far as the
// scripts use it (PBS Professional Reference Guide, "PBS environment
// variables"): the job id and name, the submission directory, the node file
// (one line per MPI process: select=1:mpiprocs=2 gives the host twice), the
// batch marker, and a per-job TMPDIR. Here every "node" is this machine.
func pbsEnv(t *testing.T, dir string, nranks int) []string {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	nodefile := filepath.Join(dir, "nodefile")
	if err := os.WriteFile(nodefile, []byte(strings.Repeat(host+"\n", nranks)), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "pbs.tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	return []string{
		"PBS_JOBID=4242.pbs-test",
		"PBS_JOBNAME=kbundle-test",
		"PBS_O_WORKDIR=" + dir,
		"PBS_O_HOST=" + host,
		"PBS_ENVIRONMENT=PBS_BATCH",
		"PBS_QUEUE=workq",
		"PBS_NODEFILE=" + nodefile,
		"PBS_NODENUM=0",
		"PBS_TASKNUM=1",
		"TMPDIR=" + tmp,
	}
}

// pbsRun is a PBS production script, the kbundle build it runs and what
// its launcher needs here.
type pbsRun struct {
	name, script string
	v            testutil.Variant
	env          []string
}

// pbsRunScripts are the PBS production scripts: kbundle-run-pals.pbs with
// an MPICH build and the PALS mpiexec stand-in, kbundle-run-openmpi.pbs
// with an Open MPI build and the real mpirun.openmpi.
func pbsRunScripts() []pbsRun {
	return []pbsRun{
		{"pals", "scripts/pbs/kbundle-run-pals.pbs", testutil.MPICH,
			[]string{"PATH=" + repoPath("test/slurm/testdata/pals") + ":" + os.Getenv("PATH")}},
		{"openmpi", "scripts/pbs/kbundle-run-openmpi.pbs", testutil.OpenMPI,
			[]string{"KBUNDLE_MPIRUN=mpirun.openmpi", "KBUNDLE_MPIRUN_ARGS=--oversubscribe --allow-run-as-root"}},
	}
}

// TestPBSScripts runs the PBS scripts as PBS would (bash on the first node
// of the job, in pbsEnv) without a PBS server, which is not installable
// here:
//
//   - kbundle-warm.pbs with no launcher;
//   - kbundle-run-pals.pbs with an MPICH build of kbundle and
//     testdata/pals/mpiexec on PATH: a stand-in for Cray PALS mpiexec that
//     starts ranks through MPICH's real mpiexec.hydra and gives them the
//     PALS variables (PALS_RANKID, PALS_APID, a per-launch PALS_SPOOL_DIR
//     removed when it ends, ...; see that file);
//   - kbundle-run-openmpi.pbs with an Open MPI build and the real
//     mpirun.openmpi reading the node file.
//
// Each production script must load, make every rank hit every kernel, and
// with a damaged bundle stop with exit 3, or run cold with KBUNDLE_FALLBACK=1.
func TestPBSScripts(t *testing.T) {
	testutil.NeedMPI(t, testutil.OpenMPI)
	testutil.NeedMPI(t, testutil.MPICH)
	app := repoPath("test/slurm/testdata/tackapp.sh")
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	base := append(pbsEnv(t, dir, 2),
		"KBUNDLE_PRESET=tack",
		"KBUNDLE_CACHE_DIR="+cache,
		"KBUNDLE_APP="+app)
	base = append(base, testutil.MPIEnv...)
	bundle := filepath.Join(cache, "cache.kbundle")

	so, se, code := run(t, append(base, "KBUNDLE="+testutil.Kbundle(t, testutil.NoMPI)), dir, "bash", repoPath("scripts/pbs/kbundle-warm.pbs"))
	if code != 0 {
		t.Fatalf("kbundle-warm.pbs: exit %d\n%s%s", code, so, se)
	}
	if ls := tackLines(so); len(ls) != 1 || !strings.Contains(ls[0], " hits=0 compiled=5 ") {
		t.Fatalf("warm-up: want one run compiling 5 kernels, got %q\n%s%s", ls, so, se)
	}
	if _, err := os.Stat(bundle); err != nil {
		t.Fatalf("no bundle after kbundle-warm.pbs: %v\n%s%s", err, so, se)
	}
	damaged := filepath.Join(dir, "damaged.kbundle")
	damage(t, bundle, damaged)

	for _, c := range pbsRunScripts() {
		t.Run(c.name, func(t *testing.T) {
			env := append(append(base[:len(base):len(base)], c.env...), "KBUNDLE="+testutil.Kbundle(t, c.v))
			script := repoPath(c.script)
			local := localDir(t, filepath.Join(dir, "pbs.tmp"), "4242.pbs-test")

			so, se, code := run(t, env, dir, "bash", script)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, so, se)
			}
			for _, d := range checkTack(t, so, 2, 5, 0) {
				if !strings.HasPrefix(d, local+"/") {
					t.Errorf("application used %s, want the loaded copy under %s", d, local)
				}
			}
			if !strings.Contains(se, "kbundle-run: cache: warm") {
				t.Errorf("no 'cache: warm' line\n%s", se)
			}
			if _, err := os.Stat(local); err == nil {
				t.Errorf("%s still exists after the job (KBUNDLE_CLEANUP=1 is the default)", local)
			}

			envD := append(env[:len(env):len(env)], "KBUNDLE_BUNDLE="+damaged)
			so, se, code = run(t, envD, dir, "bash", script)
			if code != 3 || len(tackLines(so)) != 0 {
				t.Errorf("damaged bundle: want exit 3 and no application run, got exit %d\n%s%s", code, so, se)
			}
			so, se, code = run(t, append(envD, "KBUNDLE_FALLBACK=1"), dir, "bash", script)
			if code != 0 || !strings.Contains(se, "kbundle-run: cache: cold") {
				t.Errorf("damaged bundle with KBUNDLE_FALLBACK=1: want exit 0 and a cold run, got exit %d\n%s%s", code, so, se)
			}
			checkTack(t, so, 2, 0, 5)
		})
	}
}

// qsubLines returns the qsub command lines of a document: lines starting
// with "qsub" (after "# " in a script's header comment), continued by a
// trailing backslash.
func qsubLines(text string, comment bool) []string {
	var out []string
	var cur strings.Builder
	in := false
	for _, l := range strings.Split(text, "\n") {
		if comment {
			if !strings.HasPrefix(l, "#") {
				in = false
				cur.Reset()
				continue
			}
			l = strings.TrimLeft(strings.TrimPrefix(l, "#"), " ")
		}
		l = strings.TrimSpace(l)
		if !in && !strings.HasPrefix(l, "qsub ") {
			continue
		}
		in = true
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		out = append(out, cur.String())
		cur.Reset()
		in = false
	}
	return out
}

// shellWords splits a command line as the shell would for these simple
// lines: whitespace separates words, single and double quotes group
// (variables are left unexpanded).
func shellWords(s string) []string {
	var out []string
	var w strings.Builder
	have := false
	var q rune
	for _, c := range s {
		switch {
		case q != 0 && c == q:
			q = 0
		case q != 0:
			w.WriteRune(c)
		case c == '\'' || c == '"':
			q, have = c, true
		case c == ' ' || c == '\t':
			if have {
				out = append(out, w.String())
				w.Reset()
				have = false
			}
		default:
			w.WriteRune(c)
			have = true
		}
	}
	if have {
		out = append(out, w.String())
	}
	return out
}

// qsubVars returns the variables a qsub command line passes to the job, as
// OpenPBS/PBS Pro qsub does: the LAST -v replaces earlier ones (qsub.c,
// process_opts: "the last occurrence of an option takes precedence"), its
// list is split on commas outside quotes; -V passes everything. It also
// returns the script and the number of -v options.
func qsubVars(line string) (vars map[string]bool, all bool, script string, nv int) {
	args := shellWords(line)[1:]
	withArg := map[string]bool{"-v": true, "-l": true, "-A": true, "-q": true, "-N": true,
		"-o": true, "-e": true, "-W": true, "-j": true, "-J": true, "-P": true}
	var list string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-V":
			all = true
		case withArg[a] && i+1 < len(args):
			if a == "-v" {
				list = args[i+1]
				nv++
			}
			i++
		case !strings.HasPrefix(a, "-"):
			script = a
		}
	}
	vars = map[string]bool{}
	var item strings.Builder
	var q rune
	flush := func() {
		name, _, _ := strings.Cut(item.String(), "=")
		if name != "" {
			vars[name] = true
		}
		item.Reset()
	}
	for _, c := range list {
		switch {
		case q != 0 && c == q:
			q = 0
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case q == 0 && c == ',':
			flush()
			continue
		}
		item.WriteRune(c)
	}
	flush()
	return vars, all, script, nv
}

// TestPBSSubmitLines parses every documented qsub command line (docs/pbs.md
// and the scripts' headers) as qsub does and checks that each passes the
// variables its script needs: with two -v options qsub keeps only the
// last, and the job would run without KBUNDLE_CACHE_DIR (ux review H1).
func TestPBSSubmitLines(t *testing.T) {
	// The parser itself: the line the docs used to show loses its first -v.
	old := `qsub -v KBUNDLE=$HOME/bin/kbundle,KBUNDLE_CACHE_DIR=/x,KBUNDLE_PRESET=numba -v "KBUNDLE_APP=python3 solve.py --steps 1" s.pbs`
	if v, _, s, nv := qsubVars(old); v["KBUNDLE_CACHE_DIR"] || !v["KBUNDLE_APP"] || nv != 2 || s != "s.pbs" {
		t.Fatalf("qsubVars(%q) = %v, %d -v, script %q: the parser does not model qsub", old, v, nv, s)
	}
	if v, _, _, _ := qsubVars(`qsub -v "A=1,B='x,y',C" s.pbs`); len(v) != 3 || !v["A"] || !v["B"] || !v["C"] {
		t.Fatalf("quoted comma: got %v", v)
	}

	docs := map[string]bool{"docs/pbs.md": false}
	files, _ := filepath.Glob(repoPath("scripts/pbs/*.pbs"))
	for _, f := range files {
		rel, _ := filepath.Rel(repoPath("."), f)
		docs[rel] = true
	}
	n := 0
	for doc, comment := range docs {
		b, err := os.ReadFile(repoPath(doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range qsubLines(string(b), comment) {
			vars, all, script, nv := qsubVars(l)
			if script == "" || !strings.HasSuffix(script, ".pbs") {
				continue // a line that names no script (e.g. qsub -v NAME,... in prose)
			}
			n++
			if nv > 1 {
				t.Errorf("%s: %q has %d -v options: qsub keeps only the last", doc, l, nv)
			}
			if all {
				continue
			}
			if !vars["KBUNDLE_CACHE_DIR"] && !vars["KBUNDLE_BUNDLE"] {
				t.Errorf("%s: %q does not pass KBUNDLE_CACHE_DIR or KBUNDLE_BUNDLE (got %v)", doc, l, vars)
			}
			if !vars["KBUNDLE_APP"] {
				t.Errorf("%s: %q does not pass KBUNDLE_APP (got %v)", doc, l, vars)
			}
		}
	}
	if n < 5 {
		t.Errorf("found only %d qsub lines naming a script", n)
	}
}
