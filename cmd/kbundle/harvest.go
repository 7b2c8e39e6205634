package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/mpi"
)

func init() {
	register(&cli.Command{
		Name:      "harvest",
		Usage:     "gather what a job compiled into its bundle set, as a new layer (collective, launched like load)",
		UsageText: "mpirun --map-by ppr:1:node kbundle harvest [PATH | --bundle PATH | --dir DIR] [--to DEST] [--max-size SIZE] [--python PATH] [--json] [--dry-run] [--per-node]",
		Description: "Each node leader compares its DEST with the install record load wrote there\n" +
			"(relocation undone, so an unchanged kernel is not \"changed\"). Without --to, DEST\n" +
			"is load's default for this job; where that does not exist (a bare mpirun gives\n" +
			"each launch a job id of its own) the leader takes the newest tree of yours under\n" +
			"$TMPDIR/kbundle-USER-* that kbundle installed from the set on this node, names it\n" +
			"in its line, and refuses (exit 2) when two such trees were installed within 2 s\n" +
			"of each other. Without a set (PATH, --bundle, --dir or the variables), the set\n" +
			"is the one rank 0's DEST was loaded from; a DEST loaded from another set than\n" +
			"PATH is refused (exit 2), as is a PATH that is a directory. Each leader sends\n" +
			"rank 0 the list of its new and changed files.\n" +
			"Rank 0 takes each cache unit (a Numba index with its data files, a Triton hash\n" +
			"directory) whole from the lowest rank holding it; only those bytes move, and\n" +
			"rank 0 writes them as one new layer of the set at PATH (PATH itself when no\n" +
			"set exists yet). A job that compiled nothing writes no layer. Symlinks, special\n" +
			"files, unreadable files, other owners' files and kbundle's own are skipped and\n" +
			"named. One line per node says what it compiled that the bundle lacked.\n\n" +
			"Each leader also tells which cache units the job read (a file whose access\n" +
			"time passed the install's; unknown on a noatime mount, where every unit counts\n" +
			"as used), and rank 0 records their last use in the set (PATH.d/use-*.json).\n" +
			"With --max-size, a set whose merged view then passes SIZE is merged without\n" +
			"its least recently used units, down to 90 % of SIZE (not when some node could\n" +
			"not tell what the job read); --dry-run says what that would drop.\n\n" +
			"With --per-node (one task a node: srun --ntasks-per-node=1) each node harvests\n" +
			"alone, with no collective and no MPI, and writes its own layer; nodes that\n" +
			"compiled the same unit each publish it, and a later merge folds them.\n\n" +
			"Exit status, the same on every rank: 0 harvested (or nothing to harvest),\n" +
			"1 error (nothing was published), 2 usage error or refusal (nothing was published).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "bundle", Aliases: []string{"b"}, Usage: "the bundle set's `PATH` (or give it as the argument; default: the set DEST was loaded from) [$KBUNDLE_BUNDLE]"},
			&cli.StringFlag{Name: "dir", Usage: "the cache directory `DIR`: harvest into DIR/" + broadcast.BundleName + " [$" + broadcast.CacheDirEnv + "]"},
			&cli.StringFlag{Name: "to", Usage: "node-local `DEST` that load installed (default: the job's, found by its install record) [$KBUNDLE_LOCAL_DIR]"},
			&cli.StringFlag{Name: "python", Usage: "the job's Python `PATH`, whose package versions the layer records for the presets DEST was loaded with (default: python3 on PATH) [$KBUNDLE_PYTHON]"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as a JSON object on stdout (rank 0)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "report what would be harvested and pruned; move and write nothing"},
			maxSizeFlag,
			quietFlag,
			&cli.BoolFlag{Name: "per-node", Usage: "this task harvests its node alone, with no collective and no MPI, as load --per-node: one task a node, each writing its node's layer (a later merge folds them) [$KBUNDLE_PER_NODE]"},
			&cli.GenericFlag{Name: "timeout", Value: &timeoutValue{loadcmd.DefaultTimeout},
				Usage: "end the harvest (MPI_Abort) if it has not finished by then, `D`: seconds, or with a unit (30s, 10m) [$KBUNDLE_TIMEOUT]"},
		},
		Action: harvestAction,
	})
}

func harvestAction(c *cli.Context) (err error) {
	det, derr := detect.FromEnviron()
	if derr != nil {
		det = detect.Result{Rank: detect.Unknown, Size: detect.Unknown, LocalRank: detect.Unknown}
	}
	l := newLoader(c, det)
	r, err := harvestRequest(c)
	if err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	if _, err := testFailpoint(os.Getenv("KBUNDLE_TEST_FAILPOINT"), 0); err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	opts, err := loadcmd.ResolveHarvest(r, loadcmd.CLI, l.rank)
	if err != nil {
		return l.harvestFailure(loadcmd.HarvestFailure(loadcmd.CLI, err))
	}
	var world broadcast.NodeComm = broadcast.Self()
	usingMPI := mpi.Enabled && (det.MPI || derr != nil) && !opts.PerNode()
	if opts.PerNode() {
		l.setSpeaker(true) // each node's line and failure are its own
		host, _ := os.Hostname()
		if det.LocalSize > 1 {
			return l.harvestFailure(loadcmd.HarvestFailure(loadcmd.CLI, loadcmd.PerNodeTasks(det, host)))
		}
		stop := loadcmd.GuardFor("harvest", "the file system may hang", opts.Timeout, max(det.Rank, 0), host, func(msg string) {
			fmt.Fprintf(c.App.ErrWriter, "kbundle: %s\n", msg)
			os.Exit(exitError)
		})
		defer stop()
	} else if err := l.mismatch(det, 0); err != nil {
		return err
	}
	if usingMPI {
		if det.MPI && det.LocalRank == 0 {
			stop := opts.Prefetch() // runs while MPI_Init does, as load's
			defer stop()
		}
		// As load joins MPI: the same refusal and guard.
		w, done, jerr := l.joinMPI(det, "harvest", opts.Timeout)
		if jerr != nil {
			return jerr
		}
		defer done(&err) // err: harvestAction's result
		world = loadcmd.Own(w, nil)
	} else if det.MPI && det.Size > 1 && !opts.PerNode() {
		return l.fail("this kbundle was built without MPI: harvest needs one (build with `CC=mpicc go build -tags mpi ./cmd/kbundle`)", exitUsage)
	}
	fp, _ := testFailpoint(os.Getenv("KBUNDLE_TEST_FAILPOINT"), world.Rank())
	opts.SetFailpoint(fp)
	o := loadcmd.Harvest(c.Context, world, loadcmd.CLI, opts, nil, usingMPI)
	if !o.OK {
		return l.harvestFailure(o)
	}
	if l.speaker {
		printHarvest(c, o)
	}
	return nil
}

// harvestRequest is the command line's request. The front door, as
// load's and Python's harvest(), resolves it (loadcmd.ResolveHarvest):
// --bundle or the argument, then --dir, KBUNDLE_BUNDLE, KBUNDLE_CACHE_DIR,
// else the set DEST was loaded from; --to, then KBUNDLE_LOCAL_DIR, else
// the job's DEST, found by its install record; --timeout, then
// KBUNDLE_TIMEOUT.
func harvestRequest(c *cli.Context) (loadcmd.HarvestRequest, error) {
	r := loadcmd.HarvestRequest{Bundle: c.String("bundle"), Dir: c.String("dir"), Dest: c.String("to"), DryRun: c.Bool("dry-run"), MaxSize: maxSize(c),
		Python: c.String("python")}
	switch {
	case c.NArg() > 1:
		return r, fmt.Errorf("harvest takes one bundle set (got %q and %q)", c.Args().Get(0), c.Args().Get(1))
	case c.NArg() == 1 && r.Bundle != "":
		return r, fmt.Errorf("pass the set once: --bundle %s or %s, not both", safe(r.Bundle), safe(c.Args().First()))
	case c.NArg() == 1:
		r.Bundle = c.Args().First()
	}
	if c.IsSet("timeout") {
		s := timeout(c).Seconds()
		r.Timeout = &s
	}
	if c.IsSet("per-node") {
		v := c.Bool("per-node")
		r.PerNode = &v
	}
	return r, nil
}

// printHarvest prints rank 0's outcome: --json's object on stdout, the
// report on stderr, the job's verdict last (the line a job log is read
// for: scripts/slurm, scripts/pbs).
func printHarvest(c *cli.Context, o loadcmd.HarvestOutcome) {
	if c.Bool("json") {
		writeHarvestJSON(c, o.Set, &o.Summary)
	}
	if c.Bool("quiet") {
		return
	}
	for _, line := range o.Report {
		fmt.Fprintf(c.App.ErrWriter, "kbundle: %s\n", line)
	}
	if o.Verdict != "" {
		fmt.Fprintf(c.App.ErrWriter, "kbundle: %s\n", o.Verdict)
	}
}

// harvestFailure is failure for a harvest's outcome.
func (l *loader) harvestFailure(o loadcmd.HarvestOutcome) error {
	return l.failure(loadcmd.Outcome{Kind: o.Kind, Reason: o.Reason, Hint: o.Hint})
}

// testFailpoint is the harvest's failpoint for tests from
// $KBUNDLE_TEST_FAILPOINT, STEP:RANK or STEP:RANK:wait=FILE: world rank
// RANK kills itself with SIGKILL at STEP (harvest.Plan.Failpoint's
// steps: announce, transfer, written, claimed, published), or with wait=FILE
// creates FILE.reached there and waits (60 s at most) for FILE to exist
// (the test changes something meanwhile; a file, not SIGSTOP, which some
// launchers' proxies answer with SIGCONT). Empty: none.
func testFailpoint(v string, rank int) (func(string), error) {
	if v == "" {
		return nil, nil
	}
	parts := strings.SplitN(v, ":", 3)
	r, err := -1, error(nil)
	if len(parts) >= 2 {
		r, err = strconv.Atoi(parts[1])
	}
	wait, waits := "", len(parts) == 3
	if waits {
		wait, waits = strings.CutPrefix(parts[2], "wait=")
	}
	steps := map[string]bool{"announce": true, "transfer": true, "written": true, "claimed": true, "published": true}
	if len(parts) < 2 || !steps[parts[0]] || err != nil || r < 0 || len(parts) == 3 && (!waits || wait == "") {
		return nil, fmt.Errorf("KBUNDLE_TEST_FAILPOINT=%q: want STEP:RANK or STEP:RANK:wait=FILE, STEP one of announce, transfer, written, claimed, published", v)
	}
	return func(step string) {
		if step != parts[0] || rank != r {
			return
		}
		if !waits {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			return
		}
		os.WriteFile(wait+".reached", nil, 0o600)
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(wait); err == nil {
				return
			}
		}
	}, nil
}
