package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
)

func init() {
	register(&cli.Command{
		Name:      "load",
		Usage:     "load a bundle into node-local storage on every node of an MPI job",
		UsageText: "mpirun -np N kbundle load [FILE | --bundle FILE | --dir DIR] [--to DEST] [--json] [--force] [--parents] [--allow-missing] [--preset NAME]... [--replace-presets] [--print-env] [--jobs N] [--timeout D] [--gpu-arch ARCH] [--python PATH] [--per-node] [-q]",
		Description: "Rank 0 reads the bundle once (FILE, the argument or --bundle's, else DIR/cache.kbundle,\n" +
			"else $KBUNDLE_BUNDLE, else $KBUNDLE_CACHE_DIR/cache.kbundle), checks it and broadcasts it;\n" +
			"one rank per node extracts it\n" +
			"atomically to DEST, which defaults to $KBUNDLE_LOCAL_DIR, else\n" +
			"$TMPDIR/kbundle-USER-JOB, else /tmp/kbundle-USER-JOB (JOB: the scheduler's job id,\n" +
			"so the application's later launch finds it). DEST is printed on stdout\n" +
			"by rank 0, a summary on stderr. Without a launcher, or with one task, it loads\n" +
			"locally. For the presets the bundle records (and those of --preset), each node's\n" +
			"copy is relocated for the framework and `export VAR=VALUE` lines pointing it at\n" +
			"DEST are printed (--print-env: only those).\n" +
			"Each node installs the entries of its own GPU's architecture (--gpu-arch: another,\n" +
			"or all) and compares its GPU, CPU and toolchain (the Python of --python) with\n" +
			"the warm-up's where the presets' caches key on them, warning once where they miss.\n" +
			"A load that reaches fewer nodes than the Slurm or PBS allocation holds warns.\n" +
			"A flag given wins over its variable ([$NAME] below), which wins over the default.\n\n" +
			"Exit status, the same on every rank: 0 loaded, 1 error, 2 usage error,\n" +
			"3 bundle unusable (missing, damaged, untrusted), with rank 0's reason.\n" +
			"A build that cannot join the launcher's MPI job (built for another MPI, or\n" +
			"without MPI, or the wrong srun --mpi=) exits 2 unless --per-task is given.\n" +
			"A failure on any node installs nothing on every node; the message names the\n" +
			"failing hosts and their ranks. --per-node (one task a node) gives that up: each\n" +
			"node reads, checks and installs the bundle alone, no MPI needed, and exits\n" +
			"with its own status (srun --kill-on-bad-exit ends the job on a failure).",
		Flags: append(settingFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print the summary as a JSON object on stdout (rank 0)"},
			&cli.BoolFlag{Name: "print-env", Usage: "print only the preset's export lines on stdout"},
			quietFlag,
			&cli.BoolFlag{Name: "per-task", Usage: "when this build cannot join the launcher's MPI job (another MPI's build, no MPI, the wrong srun --mpi=), let each task load alone instead of exiting 2"},
		),
		Action: loadAction,
	})
}

// settingFlags are load's flags, made from loadcmd.Settings: no EnvVars,
// so that loadcmd.Resolve reads each variable (the value given wins, then
// the variable, then the default); --help names the variable.
func settingFlags() []cli.Flag {
	var fs []cli.Flag
	for _, s := range loadcmd.Settings {
		if s.Flag == "" {
			continue
		}
		var aliases []string
		if s.Alias != "" {
			aliases = []string{s.Alias}
		}
		usage := s.Usage
		if s.Env != "" {
			usage += " [$" + s.Env + "]"
		}
		switch s.Flag {
		case "force", "parents", "allow-missing", "replace-presets", "per-node":
			fs = append(fs, &cli.BoolFlag{Name: s.Flag, Aliases: aliases, Usage: usage})
		case "jobs":
			fs = append(fs, &cli.IntFlag{Name: s.Flag, Aliases: aliases, Usage: usage})
		case "preset":
			fs = append(fs, &cli.StringSliceFlag{Name: s.Flag, Aliases: aliases, Usage: usage})
		case "timeout":
			fs = append(fs, &cli.GenericFlag{Name: s.Flag, Aliases: aliases, Value: &timeoutValue{loadcmd.DefaultTimeout}, Usage: usage})
		default:
			fs = append(fs, &cli.StringFlag{Name: s.Flag, Aliases: aliases, Usage: usage})
		}
	}
	return fs
}

// request is what the command line asks (only what it gives: the
// variables are loadcmd.Resolve's).
func request(c *cli.Context) loadcmd.Request {
	r := loadcmd.Request{Bundle: c.String("bundle"), Dir: c.String("dir"), Dest: c.String("to"), Force: c.Bool("force"), Parents: c.Bool("parents"),
		ReplacePresets: c.Bool("replace-presets"), GPUArch: c.String("gpu-arch"), Python: c.String("python")}
	if c.IsSet("allow-missing") {
		v := c.Bool("allow-missing")
		r.AllowMissing = &v
	}
	if c.IsSet("per-node") {
		v := c.Bool("per-node")
		r.PerNode = &v
	}
	if c.IsSet("jobs") {
		n := c.Int("jobs")
		r.Jobs = &n
	}
	if c.IsSet("preset") {
		v := c.StringSlice("preset")
		r.Presets = &v
	}
	if c.IsSet("timeout") {
		s := timeout(c).Seconds()
		r.Timeout = &s
	}
	return r
}

// bundlePositional takes load's FILE argument, the bundle, as info and
// verify take theirs (issue 25, U14): into r.Bundle, where --bundle
// names the same file or nothing.
func bundlePositional(c *cli.Context, r *loadcmd.Request) error {
	switch {
	case c.NArg() > 1:
		return fmt.Errorf("load takes one FILE, the bundle (got %q and %q); pass DEST with --to DEST", safe(c.Args().Get(0)), safe(c.Args().Get(1)))
	case c.NArg() == 0:
		return nil
	case r.Bundle != "" && r.Bundle != c.Args().First():
		return fmt.Errorf("two bundles: FILE %q and --bundle %q; pass one", safe(c.Args().First()), safe(r.Bundle))
	case r.Dir != "":
		return fmt.Errorf("pass FILE or --dir DIR, not both (got %q and --dir %q)", safe(c.Args().First()), safe(r.Dir))
	}
	r.Bundle = c.Args().First()
	return nil
}

// pathKinds refuses a directory where the bundle file belongs (FILE,
// --bundle, $KBUNDLE_BUNDLE), and a file as --dir, each with the hint
// that names the other (U14), before anything is read: exit 3, as the
// reader's own "not a valid bundle" was.
func pathKinds(r loadcmd.Request) error {
	if r.Bundle == "" && r.Dir != "" {
		return fileAsDir(r.Dir, "load")
	}
	b := r.Bundle
	if b == "" && r.Dir == "" {
		b = loadcmd.DefaultBundle(os.Getenv)
	}
	if b == "" {
		return nil
	}
	return dirAsBundle(b, "--dir "+safe(b))
}

// exitCode is err's exit status (a cli.ExitCoder's), else 1.
func exitCode(err error) int {
	if ec, ok := err.(cli.ExitCoder); ok {
		return ec.ExitCode()
	}
	return exitError
}

// loader carries one `kbundle load` run.
type loader struct {
	c       *cli.Context
	rank    int  // this process's rank: MPI's, else the launcher's
	speaker bool // prints messages (rank 0)
	// perNode: --per-node, each node's task loads alone; every task
	// speaks for its node's failure, the launcher's rank 0 alone for a
	// success.
	perNode bool
	host    string
}

// newLoader is the loader of c's collective command, rank 0 of the
// launcher (or no launcher) speaking until MPI says who is rank 0.
func newLoader(c *cli.Context, det detect.Result) *loader {
	l := &loader{c: c, rank: max(det.Rank, 0)}
	l.setSpeaker(det.Rank <= 0)
	return l
}

// setSpeaker makes this process the speaker, or not: only the speaker
// prints JSON, its object or its error object.
func (l *loader) setSpeaker(s bool) {
	l.speaker = s
	l.c.App.Metadata[metaMuted] = !s
	if q, ok := l.c.App.Metadata[metaQuietSignal].(*atomic.Bool); ok {
		q.Store(!s)
	}
	if a, ok := l.c.App.Metadata[metaAnnounceSignal].(*atomic.Bool); ok {
		a.Store(s)
	}
}

// say prints line (a warning of loadcmd's) with the "kbundle: " prefix
// on the speaker.
func (l *loader) say(line string) {
	if l.speaker {
		fmt.Fprintf(l.c.App.ErrWriter, "kbundle: %s\n", line)
	}
}

// fail returns the exit error, the same code everywhere. The speaker
// prints the message now, before MPI_Finalize: once another rank has
// exited non-zero, mpirun may kill this one before main could print it;
// under --json, its error object too (execute's, written early).
func (l *loader) fail(msg string, code int) error {
	return l.failAs(msg, code, kindOf(code, nil))
}

// failAs is fail for a failure of kind k.
func (l *loader) failAs(msg string, code int, k loadcmd.Kind) error {
	err := withKind(cli.Exit("", code), k)
	if l.speaker && msg != "" {
		fmt.Fprintf(l.c.App.ErrWriter, "kbundle: %s\n", msg)
		if l.c.Bool("json") && !wroteStdout(l.c) { // one object: not after a success's (MPI_Finalize failing)
			writeFailureJSON(l.c.App.Writer, code, msg, err)
		}
	}
	return err
}

// failure is fail for a failed outcome; a communication failure is
// local, and every rank says it.
func (l *loader) failure(o loadcmd.Outcome) error {
	msg := strings.ReplaceAll(o.Reason, "\n", "\nkbundle: ")
	if o.Hint != "" {
		msg += "\nkbundle: " + o.Hint
	}
	if o.Kind == loadcmd.Comm {
		return withKind(cli.Exit(msg, o.Kind.Exit()), o.Kind)
	}
	return l.failAs(msg, o.Kind.Exit(), o.Kind)
}

// loadMemoryLimit is the Go heap's soft limit during a load, unless
// GOMEMLIMIT says otherwise: what a leader holds is bounded (a window of
// 64 MiB, a chunk, a segment per worker), and a collector that waits for
// the heap to double would otherwise let it grow well past that.
const loadMemoryLimit = 160 << 20

func loadAction(c *cli.Context) error {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(loadMemoryLimit)
	}
	det, derr := detect.FromEnviron()
	if derr != nil {
		det = detect.Result{Rank: detect.Unknown, Size: detect.Unknown, LocalRank: detect.Unknown}
	}
	l := newLoader(c, det)

	// Usage errors: the same on every rank, printed by rank 0.
	r := request(c)
	if err := bundlePositional(c, &r); err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	if err := pathKinds(r); err != nil {
		return l.fail(err.Error(), exitCode(err))
	}
	opts, err := loadcmd.Resolve(r, loadcmd.CLI, l.rank)
	if err != nil {
		return l.failure(loadcmd.Failure(loadcmd.CLI, err))
	}
	if c.Bool("print-env") && c.Bool("json") {
		return l.fail("--print-env and --json do not go together: --json's \"env\" holds the variables", exitUsage)
	}
	if derr != nil {
		l.say("warning: " + derr.Error())
	}

	if opts.PerNode() {
		return l.loadPerNode(det, opts)
	}
	if err := l.mismatch(det, 0); err != nil {
		return err
	}
	if mpi.Enabled && (det.MPI || derr != nil) {
		if det.MPI && det.LocalRank == 0 {
			stop := opts.Prefetch() // runs while MPI_Init does (issue 31)
			defer stop()
		}
		return l.withMPI(det, opts)
	}
	if det.MPI {
		l.say(loadcmd.NoMPIWarning(det.Size))
		if det.LocalRank > 0 {
			// Only the node's first task extracts; the others check the
			// bundle and exit with the same status as far as they can tell.
			if err := opts.Check(); err != nil {
				return l.failure(loadcmd.Failure(loadcmd.CLI, err))
			}
			return nil
		}
	}
	return l.run(broadcast.Self(), opts, false, det.MPI)
}

// loadPerNode is load --per-node: this task reads, checks and installs
// the bundle on its node alone, over broadcast.Self, whatever the build
// (MPI is never initialised): no collective, so no agreement between
// nodes either; each task's exit status is its node's, for the launcher
// to act on (srun --kill-on-bad-exit).
func (l *loader) loadPerNode(det detect.Result, opts loadcmd.Options) error {
	l.perNode = true
	l.host, _ = os.Hostname()
	l.setSpeaker(true)
	if err := opts.PerNodeCheck(det, l.host); err != nil {
		return l.failure(loadcmd.Failure(loadcmd.CLI, err))
	}
	stop := loadcmd.GuardFor("load", "the file system may hang", opts.Timeout, max(det.Rank, 0), l.host, func(msg string) {
		fmt.Fprintf(l.c.App.ErrWriter, "kbundle: %s\n", msg)
		os.Exit(exitError)
	})
	defer stop()
	return l.run(broadcast.Self(), opts, false, det.MPI)
}

// joinMPI initialises MPI for the collective command what (load,
// harvest), refuses a build that cannot join the launcher's job, makes
// rank 0 the speaker and arms the timeout guard d before the first
// collective. done stops the guard and finalises MPI, keeping the first
// error in *err; after an error nothing is left to do.
func (l *loader) joinMPI(det detect.Result, what string, d time.Duration) (w *mpi.Comm, done func(err *error), err error) {
	if err := mpi.Init(); err != nil {
		return nil, nil, withKind(cli.Exit(err.Error(), exitError), loadcmd.Comm)
	}
	finalize := func(err *error) {
		if ferr := mpi.Finalize(); ferr != nil && *err == nil {
			*err = l.failAs(ferr.Error(), exitError, loadcmd.Comm)
		}
	}
	w = mpi.World()
	if err := l.mismatch(det, w.Size()); err != nil {
		finalize(&err)
		return nil, nil, err
	}
	l.rank = w.Rank()
	l.setSpeaker(w.Rank() == 0)
	host, _ := os.Hostname()
	stop := loadcmd.GuardFor(what, "a node or link may be down", d, w.Rank(), host, func(msg string) {
		fmt.Fprintf(l.c.App.ErrWriter, "kbundle: %s\n", msg)
		mpi.Abort(exitError)
	})
	return w, func(err *error) { stop(); finalize(err) }, nil
}

// withMPI initialises MPI, loads over the world, and finalises.
func (l *loader) withMPI(det detect.Result, opts loadcmd.Options) (err error) {
	w, done, err := l.joinMPI(det, "load", opts.Timeout)
	if err != nil {
		return err
	}
	defer done(&err)
	if det.Size != detect.Unknown || det.MPI {
		if msg := detect.CheckComm(det, w.Rank(), w.Size()); msg != "" {
			l.say("warning: " + msg)
		}
	}
	return l.run(loadcmd.Own(w, nil), opts, true, false)
}

// run loads over world and reports.
func (l *loader) run(world broadcast.NodeComm, opts loadcmd.Options, usingMPI, tasks bool) error {
	c := l.c
	var bar *progress
	if l.speaker && world.Rank() == 0 {
		bar = newProgress(c, "loading")
		opts.Progress = bar.update
	}
	o := loadcmd.Load(c.Context, world, loadcmd.CLI, opts, nil, usingMPI, tasks)
	bar.done()
	if !o.OK {
		if l.perNode {
			o.Reason = "node " + safe(l.host) + ": " + o.Reason
		}
		return l.failure(o)
	}
	if l.perNode && l.rank > 0 {
		return nil // the launcher's rank 0 speaks for a success
	}
	if !l.speaker {
		return nil
	}
	if w := loadcmd.AllocationWarning(detect.AllocationFrom(os.LookupEnv, os.ReadFile), o.Nodes); w != "" && !l.perNode {
		o.Warnings = append(o.Warnings, w)
	}
	for _, w := range o.Warnings {
		l.say(w)
	}
	out := c.App.Writer
	switch {
	case c.Bool("json"):
		return writeJSON(out, o)
	case c.Bool("print-env"):
		// Only stdout changes: the summary stays on stderr (U12); the
		// recorded presets count as for a plain load (U4).
		if len(o.Env) == 0 {
			return l.fail(fmt.Sprintf("--print-env: the bundle records no preset and none was given, so there is nothing to print (loaded into %s); pass --preset NAME", safe(o.Dest)), exitUsage)
		}
		printExports(out, o.Env)
	default:
		fmt.Fprintln(out, o.Dest)
		printExports(out, o.Env)
	}
	if c.Bool("quiet") {
		return nil
	}
	nodes := plural(o.Nodes, "node", "nodes")
	if l.perNode {
		nodes = "this node, " + safe(l.host) + " (--per-node: each node's task loads its own)"
	}
	if o.AlreadyNodes == o.Nodes {
		fmt.Fprintf(c.App.ErrWriter, "kbundle: already installed: same content digest %s at %s on %s, unchanged since; nothing was rewritten\n",
			o.ContentDigest, safe(o.Dest), nodes)
		return nil
	}
	if o.AlreadyNodes > 0 {
		fmt.Fprintf(c.App.ErrWriter, "kbundle: already installed on %s (same content digest %s, unchanged since): left as they were\n",
			plural(o.AlreadyNodes, "node", "nodes"), o.ContentDigest)
	}
	if o.MissingSet { // nothing was loaded: say what was installed (U43)
		fmt.Fprintf(c.App.ErrWriter, "kbundle: installed an empty cache, for the job to fill, at %s on %s in %s\n", o.Dest, nodes, round(o.TotalSeconds))
		return nil
	}
	fmt.Fprintf(c.App.ErrWriter, "kbundle: loaded %d entries (%s, %s unpacked) to %s on %s in %s: read %s, broadcast %s, extract %s (overlapping)\n",
		o.Entries, human(o.Bytes), human(o.RawBytes), o.Dest, nodes, round(o.TotalSeconds),
		round(o.ReadSeconds), round(o.BcastSeconds), round(o.ExtractSecs))
	return nil
}

func round(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

func printExports(w io.Writer, env []string) {
	for _, line := range preset.Exports(env) {
		fmt.Fprintln(w, line)
	}
}
