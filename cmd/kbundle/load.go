package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/warmup"
)

func init() {
	register(&cli.Command{
		Name:      "load",
		Usage:     "load a bundle into node-local storage on every node of an MPI job",
		UsageText: "mpirun -np N kbundle load [--bundle FILE | --dir DIR] [--to DEST] [--json] [--force] [--preset NAME]... [--print-env] [--timeout D] [-q]",
		Description: "Rank 0 reads the bundle once (FILE, else DIR/cache.kbundle, DIR defaulting to\n" +
			"$KBUNDLE_CACHE_DIR), checks it and broadcasts it; one rank per node extracts it\n" +
			"atomically to DEST, which defaults to $KBUNDLE_LOCAL_DIR, else\n" +
			"$TMPDIR/kbundle-USER-JOB, else /tmp/kbundle-USER-JOB (JOB: the scheduler's job id,\n" +
			"so the application's later launch finds it). DEST is printed on stdout\n" +
			"by rank 0, a summary on stderr. Without a launcher, or with one task, it loads\n" +
			"locally. With --preset, each node's copy is relocated for the framework and\n" +
			"`export VAR=VALUE` lines pointing it at DEST are printed (--print-env: only those).\n\n" +
			"Exit status, the same on every rank: 0 loaded, 1 error, 2 usage error,\n" +
			"3 bundle unusable (missing, damaged, untrusted), with rank 0's reason.\n" +
			"A failure on any node installs nothing on every node; the message names the\n" +
			"failing hosts and their ranks.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "bundle", Aliases: []string{"b"}, EnvVars: []string{"KBUNDLE_BUNDLE"}, Usage: "bundle `FILE` to load"},
			dirFlag,
			&cli.StringFlag{Name: "to", EnvVars: []string{"KBUNDLE_LOCAL_DIR"}, Usage: "node-local `DEST`ination directory"},
			&cli.BoolFlag{Name: "force", Usage: "replace DEST if it exists and is not empty"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as a JSON object on stdout (rank 0)"},
			presetFlag,
			&cli.BoolFlag{Name: "print-env", Usage: "print only the preset's export lines on stdout"},
			jobsFlag,
			quietFlag,
			timeoutFlag(loadcmd.DefaultTimeout, "end the load (MPI_Abort) if it has not finished by then: a node or link is down"),
		},
		Action: loadAction,
	})
}

// loadSummary is `kbundle load --json`; fields are only ever added.
type loadSummary struct {
	Dest          string   `json:"dest"`
	Bundle        string   `json:"bundle"`
	Entries       int      `json:"entries"`
	Bytes         int64    `json:"bytes"`
	RawBytes      int64    `json:"raw_bytes"`
	Nodes         int      `json:"nodes"`
	Ranks         int      `json:"ranks"`
	MPI           bool     `json:"mpi"`
	ReadSeconds   float64  `json:"read_seconds"`
	BcastSeconds  float64  `json:"bcast_seconds"`
	ExtractSecs   float64  `json:"extract_seconds"`
	TotalSeconds  float64  `json:"total_seconds"`
	MismatchNodes int      `json:"mismatch_nodes"`
	MismatchKeys  []string `json:"mismatch_keys,omitempty"`
	Env           []string `json:"env,omitempty"`
	Presets       []string `json:"presets,omitempty"`
	HeldBytes     int64    `json:"held_bytes"`
	Taken         string   `json:"taken,omitempty"` // the default DEST, held by another user on TakenNodes nodes
	TakenNodes    int      `json:"taken_nodes,omitempty"`
}

// loader carries one `kbundle load` run.
type loader struct {
	c       *cli.Context
	rank    int  // this process's rank: MPI's, else the launcher's
	speaker bool // prints messages (rank 0)
	tasks   bool // one of several tasks of a launcher, each loading alone (no MPI)
	presets []*warmup.Preset
}

func (l *loader) warnf(format string, args ...any) {
	if l.speaker {
		fmt.Fprintf(l.c.App.ErrWriter, "kbundle: warning: "+format+"\n", args...)
	}
}

// fail returns the exit error, the same code everywhere. The speaker
// prints the message now, before MPI_Finalize: once another rank has
// exited non-zero, mpirun may kill this one before main could print it.
func (l *loader) fail(msg string, code int) error {
	if l.speaker && msg != "" {
		fmt.Fprintf(l.c.App.ErrWriter, "kbundle: %s\n", msg)
	}
	return cli.Exit("", code)
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
	l := &loader{c: c, rank: max(det.Rank, 0), speaker: det.Rank <= 0}

	// Usage errors: the same on every rank, printed by rank 0.
	if c.NArg() > 0 {
		return l.fail(fmt.Sprintf("load takes no arguments (got %q)", c.Args().First()), exitUsage)
	}
	var path string
	// A flag given on the command line beats one from the environment
	// (KBUNDLE_BUNDLE, KBUNDLE_CACHE_DIR).
	fileGiven := c.IsSet("bundle") && !envSet(c, "bundle")
	dirGiven := c.IsSet("dir") && !envSet(c, "dir")
	switch file, dir := c.String("bundle"), c.String("dir"); {
	case fileGiven && dirGiven:
		return l.fail("pass --bundle FILE or --dir DIR, not both", exitUsage)
	case file != "" && !dirGiven:
		path = file
	case dir != "":
		path = filepath.Join(dir, broadcast.BundleName)
	default:
		return l.fail("no bundle: pass --bundle FILE or --dir DIR, or set KBUNDLE_BUNDLE or KBUNDLE_CACHE_DIR", exitUsage)
	}
	presets, err := lookupPresets(c.StringSlice("preset"))
	if err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	l.presets = presets
	if c.Bool("print-env") && len(l.presets) == 0 {
		return l.fail("--print-env needs --preset NAME", exitUsage)
	}
	trust, err := trustPolicy()
	if err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	if derr != nil && !errors.Is(derr, detect.ErrInvalidMode) {
		l.warnf("%v", derr)
	}

	if mpi.Enabled && (det.MPI || derr != nil) {
		return l.withMPI(det, path)
	}
	world := broadcast.Self()
	l.tasks = det.MPI
	if det.MPI {
		l.warnf("this kbundle was built without MPI: each of the %d tasks reads the bundle itself "+
			"(build with `CC=mpicc go build -tags mpi ./cmd/kbundle` to read it once per job)", det.Size)
		if det.LocalRank > 0 {
			// Only the node's first task extracts; the others check the
			// bundle and exit with the same status as far as they can tell.
			_, err := broadcast.LoadBundle(world, broadcast.WithPath(path), broadcast.WithTrust(trust))
			if err != nil {
				return l.fail(err.Error(), loadExitCode(err))
			}
			return nil
		}
	}
	return l.run(world, false, path)
}

// withMPI initialises MPI, loads over the world, and finalises.
func (l *loader) withMPI(det detect.Result, path string) (err error) {
	if err := mpi.Init(); err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	defer func() {
		if ferr := mpi.Finalize(); ferr != nil && err == nil {
			err = l.fail(ferr.Error(), exitError)
		}
	}()
	w := mpi.World()
	l.rank, l.speaker = w.Rank(), w.Rank() == 0
	if det.Size != detect.Unknown || det.MPI {
		if msg := detect.CheckComm(det, w.Rank(), w.Size()); msg != "" {
			l.warnf("%s", msg)
		}
	}
	return l.run(broadcast.FromMPI(w), true, path)
}

// loadExitCode is exitFor's status for a load: a failure that is not
// about the bundle (ErrNoBundle) happened at a node's destination.
func loadExitCode(err error) int {
	code, _ := exitFor(loadError(err))
	return code
}

// loadError marks a node-local failure as a destination problem for
// exitFor.
func loadError(err error) error {
	if errors.Is(err, broadcast.ErrNoBundle) {
		return err
	}
	return atDest(err)
}

// run loads over world and reports.
func (l *loader) run(world broadcast.NodeComm, usingMPI bool, path string) error {
	c := l.c
	// A job id the same on every rank, for the default DEST.
	job, err := loadcmd.JobID(world, os.Getenv)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	dest, err := defaultDest(c.String("to"), job)
	if err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	plan, err := loadcmd.Plan(os.Getenv)
	if err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	plan.Bundle, plan.Dest, plan.Force, plan.Jobs = path, dest, c.Bool("force"), c.Int("jobs")
	// The default name is moved if another user holds it; not when each
	// task of a launcher loads alone: they could not agree on a new one.
	plan.GuessableDest = c.String("to") == "" && !l.tasks
	plan.Presets, plan.UseRecorded = l.presets, len(l.presets) == 0 && !c.IsSet("preset")
	plan.Timeout = timeout(c)
	plan.OnTimeout = func(msg string) {
		fmt.Fprintf(c.App.ErrWriter, "kbundle: %s\n", msg)
		mpi.Abort(exitError)
	}
	if !usingMPI {
		plan.Timeout = 0      // nothing collective to hang on
		plan.RanksPerNode = 0 // one process: one node
	}
	res, err := load.Run(c.Context, world, plan)
	if err != nil {
		if errors.Is(err, broadcast.ErrComm) {
			return cli.Exit(err.Error(), exitError) // local: every rank says it
		}
		return l.fail(loadMessage(err), loadExitCode(err))
	}
	if !l.speaker {
		return nil
	}
	s := loadSummary{
		Dest: res.Dest, Bundle: path, Entries: res.Entries, Bytes: res.Bytes,
		RawBytes: res.RawBytes, Nodes: res.Nodes, Ranks: res.Ranks, MPI: usingMPI,
		ReadSeconds: res.Read.Seconds(), BcastSeconds: res.Bcast.Seconds(),
		ExtractSecs: res.Extract.Seconds(), TotalSeconds: res.Total.Seconds(),
		MismatchNodes: res.MismatchNodes, MismatchKeys: res.MismatchKeys, Env: res.Env,
		Presets: res.Presets, HeldBytes: res.Held, Taken: res.Taken, TakenNodes: res.TakenNodes,
	}
	if res.Taken != "" {
		l.warnf("%s belongs to another user on %s (made in advance, as if to deny this load); loaded into %s instead (the exported variables point there)",
			safe(res.Taken), plural(res.TakenNodes, "node", "nodes"), safe(res.Dest))
	}
	if len(res.EmptyPresets) > 0 {
		l.warnf("the bundle has nothing for preset %s: its variables point at an empty directory", strings.Join(res.EmptyPresets, ", "))
	}
	if nd := res.MismatchNodes; nd > 0 {
		what := "a node differs"
		if nd > 1 {
			what = fmt.Sprintf("%d nodes differ", nd)
		}
		detail := ""
		if len(res.MismatchKeys) > 0 {
			detail = " (rank 0's node: " + safe(strings.Join(res.MismatchKeys, "; ")) + ")"
		}
		l.warnf("%s from the machine the cache was warmed on%s; compiled kernels may miss", what, detail)
	}
	out := c.App.Writer
	switch {
	case c.Bool("json"):
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return cli.Exit(err.Error(), exitError)
		}
		fmt.Fprintf(out, "%s\n", b)
		return nil
	case c.Bool("print-env"):
		printExports(out, res.Env)
		return nil
	}
	fmt.Fprintln(out, s.Dest)
	printExports(out, res.Env)
	if c.Bool("quiet") {
		return nil
	}
	nodes := plural(s.Nodes, "node", "nodes")
	fmt.Fprintf(c.App.ErrWriter, "kbundle: loaded %d entries (%s, %s unpacked) to %s on %s in %s: read %s, broadcast %s, extract %s (overlapping)\n",
		s.Entries, human(s.Bytes), human(s.RawBytes), s.Dest, nodes, round(res.Total),
		round(res.Read), round(res.Bcast), round(res.Extract))
	return nil
}

// loadMessage is the agreed failure as printed: one line a failing node
// (host, ranks, reason), then what it means, then a hint.
func loadMessage(err error) string {
	lines := loadcmd.Reasons(err)
	if !errors.Is(err, broadcast.ErrNoBundle) {
		lines = append(lines, "nothing was installed on any node")
	}
	if h := hint(loadError(err)); h != "" {
		lines = append(lines, h)
	}
	return strings.Join(lines, "\nkbundle: ")
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func printExports(w io.Writer, env []string) {
	for _, line := range warmup.Exports(env) {
		fmt.Fprintln(w, line)
	}
}

func envSet(c *cli.Context, name string) bool {
	for _, f := range c.Command.Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == name {
			for _, e := range sf.EnvVars {
				if v, ok := os.LookupEnv(e); ok && v == c.String(name) {
					return true
				}
			}
		}
	}
	return false
}

// defaultDest returns to, absolute, or the default node-local per-job
// directory.
func defaultDest(to, job string) (string, error) {
	// DEST is printed alone on stdout's first line, for scripts: a
	// control character (a newline) in it would break that.
	if strings.IndexFunc(to, unicode.IsControl) >= 0 {
		return "", fmt.Errorf("--to %s: control characters are not allowed in DEST", safe(to))
	}
	return loadcmd.Dest(to, os.Getenv, job)
}
