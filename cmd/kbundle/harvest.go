package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/hostinfo"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/harvest"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/warmup"
)

func init() {
	register(&cli.Command{
		Name:      "harvest",
		Usage:     "gather what a job compiled into its bundle set, as a new layer (collective, launched like load)",
		UsageText: "mpirun --map-by ppr:1:node kbundle harvest [--bundle PATH | --dir DIR] [--to DEST] [--max-size SIZE] [--json] [--dry-run]",
		Description: "Each node leader compares its DEST (as given to load; the same default) with\n" +
			"the install record load wrote there (relocation undone, so an unchanged kernel\n" +
			"is not \"changed\") and sends rank 0 the list of its new and changed files.\n" +
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
			"Exit status, the same on every rank: 0 harvested (or nothing to harvest),\n" +
			"1 error (nothing was published).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "bundle", Aliases: []string{"b"}, Usage: "the bundle set's `PATH` [$KBUNDLE_BUNDLE]"},
			dirFlag,
			&cli.StringFlag{Name: "to", EnvVars: []string{"KBUNDLE_LOCAL_DIR"}, Usage: "node-local `DEST` that load installed"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as a JSON object on stdout (rank 0)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "report what would be harvested and pruned; move and write nothing"},
			maxSizeFlag,
			quietFlag,
			&cli.GenericFlag{Name: "timeout", Value: &timeoutValue{loadcmd.DefaultTimeout}, EnvVars: []string{"KBUNDLE_TIMEOUT"},
				Usage: "end the harvest (MPI_Abort) if it has not finished by then, `D`: seconds, or with a unit (30s, 10m)"},
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
	if c.NArg() > 0 {
		return l.fail(fmt.Sprintf("harvest takes no arguments (got %q)", c.Args().First()), exitUsage)
	}
	// The rule load follows: --bundle, then --dir, then KBUNDLE_BUNDLE,
	// then KBUNDLE_CACHE_DIR.
	path := c.String("bundle")
	if dir := c.String("dir"); path == "" && dir != "" && dir != os.Getenv(broadcast.CacheDirEnv) {
		path = filepath.Join(dir, broadcast.BundleName)
	}
	if path == "" {
		path = loadcmd.DefaultBundle(os.Getenv)
	}
	if path == "" {
		return l.fail("no bundle set: pass --bundle PATH or --dir DIR, or set KBUNDLE_BUNDLE or KBUNDLE_CACHE_DIR", exitUsage)
	}
	trust, err := trustPolicy()
	if err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	if err := l.mismatch(det, 0); err != nil {
		return err
	}
	var world broadcast.NodeComm = broadcast.Self()
	usingMPI := mpi.Enabled && (det.MPI || derr != nil)
	if usingMPI {
		// As load joins MPI: the same refusal and guard.
		w, done, jerr := l.joinMPI(det, "harvest", timeout(c))
		if jerr != nil {
			return jerr
		}
		defer done(&err) // err: harvestAction's result
		world = broadcast.FromMPI(w)
	} else if det.MPI && det.Size > 1 {
		return l.fail("this kbundle was built without MPI: harvest needs one (build with `CC=mpicc go build -tags mpi ./cmd/kbundle`)", exitUsage)
	}
	job, err := loadcmd.JobID(world, os.Getenv)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	to := c.String("to")
	// DEST is a path on stdout's lines, for scripts: no control characters.
	if strings.IndexFunc(to, unicode.IsControl) >= 0 {
		return l.fail(fmt.Sprintf("--to %s: control characters are not allowed in DEST", safe(to)), exitUsage)
	}
	dest, err := loadcmd.Dest(to, os.Getenv, job)
	if err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	lp, err := loadcmd.Knobs(os.Getenv)
	if err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	host, _ := os.Hostname()
	plan := harvest.Plan{Bundle: path, Dest: dest, Host: host, Trust: trust, DryRun: c.Bool("dry-run"), Job: job, MaxSize: maxSize(c)}
	if usingMPI {
		plan.RanksPerNode = lp.RanksPerNode
	}
	if world.Rank() == 0 && !plan.DryRun {
		plan.Meta = harvestMeta(fakeNodeDest(dest, lp.RanksPerNode, usingMPI))
	}
	if plan.Failpoint, err = testFailpoint(os.Getenv("KBUNDLE_TEST_FAILPOINT"), world.Rank()); err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	sum, err := harvest.Run(c.Context, world, plan)
	if err != nil {
		if errors.Is(err, broadcast.ErrComm) || sum == nil {
			return cli.Exit(err, exitError)
		}
		return l.fail(err.Error(), exitError)
	}
	if !l.speaker {
		return nil
	}
	if c.Bool("json") {
		writeHarvestJSON(c, path, sum)
	}
	if !c.Bool("quiet") {
		for _, line := range loadcmd.HarvestReport(sum) {
			fmt.Fprintf(c.App.ErrWriter, "kbundle: %s\n", line)
		}
	}
	return nil
}

// harvestMeta is what rank 0 records in the layer: this machine and the
// toolchain of the presets its DEST was installed with (its install
// record), as warm records them for the base.
func harvestMeta(dest string) map[string]string {
	var presets []*warmup.Preset
	if rec, err := bundle.ReadInstallRecord(dest); err == nil {
		presets, _ = warmup.ParseList(rec.Presets...)
	}
	m := hostinfo.Collect()
	tc, _ := toolchainMeta(presets, "")
	for k, v := range tc {
		m[k] = v
	}
	return m
}

// fakeNodeDest is rank 0's DEST under KBUNDLE_TEST_RANKS_PER_NODE
// (load.FakeNodeDest of rank 0), when the harvest runs over MPI.
func fakeNodeDest(dest string, ranksPerNode int, usingMPI bool) string {
	if !usingMPI {
		return dest
	}
	return load.FakeNodeDest(dest, ranksPerNode, 0)
}

// testFailpoint is the harvest's failpoint for tests from
// $KBUNDLE_TEST_FAILPOINT, STEP:RANK or STEP:RANK:wait=FILE: world rank
// RANK kills itself with SIGKILL at STEP (harvest.Plan.Failpoint's
// steps: announce, transfer, written, published), or with wait=FILE
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
	steps := map[string]bool{"announce": true, "transfer": true, "written": true, "published": true}
	if len(parts) < 2 || !steps[parts[0]] || err != nil || r < 0 || len(parts) == 3 && (!waits || wait == "") {
		return nil, fmt.Errorf("KBUNDLE_TEST_FAILPOINT=%q: want STEP:RANK or STEP:RANK:wait=FILE, STEP one of announce, transfer, written, published", v)
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
