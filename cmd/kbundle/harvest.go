package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/harvest"
	"github.com/kbundle/kbundle/mpi"
)

func init() {
	register(&cli.Command{
		Name:      "harvest",
		Usage:     "gather what a job compiled into its bundle set, as a new layer (collective, launched like load)",
		UsageText: "mpirun --map-by ppr:1:node kbundle harvest [--bundle PATH | --dir DIR] [--to DEST] [--json] [--dry-run]",
		Description: "Each node leader compares its DEST (as given to load; the same default) with\n" +
			"the install record load wrote there (relocation undone, so an unchanged kernel\n" +
			"is not \"changed\") and sends rank 0 the list of its new and changed files.\n" +
			"Rank 0 takes each cache unit (a Numba index with its data files, a Triton hash\n" +
			"directory) whole from the lowest rank holding it; only those bytes move, and\n" +
			"rank 0 writes them as one new layer of the set at PATH (PATH itself when no\n" +
			"set exists yet). A job that compiled nothing writes no layer. Symlinks, special\n" +
			"files, unreadable files, other owners' files and kbundle's own are skipped and\n" +
			"named. One line per node says what it compiled that the bundle lacked.\n\n" +
			"Exit status, the same on every rank: 0 harvested (or nothing to harvest),\n" +
			"1 error (nothing was published).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "bundle", Aliases: []string{"b"}, EnvVars: []string{"KBUNDLE_BUNDLE"}, Usage: "the bundle set's `PATH`"},
			dirFlag,
			&cli.StringFlag{Name: "to", EnvVars: []string{"KBUNDLE_LOCAL_DIR"}, Usage: "node-local `DEST` that load installed"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as a JSON object on stdout (rank 0)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "report what would be harvested; move and write nothing"},
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
	l := &loader{c: c, rank: max(det.Rank, 0), speaker: det.Rank <= 0}
	if c.NArg() > 0 {
		return l.fail(fmt.Sprintf("harvest takes no arguments (got %q)", c.Args().First()), exitUsage)
	}
	path := c.String("bundle")
	if path == "" && c.String("dir") != "" {
		path = filepath.Join(c.String("dir"), broadcast.BundleName)
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
	plan := harvest.Plan{Bundle: path, Dest: dest, Host: host, Trust: trust, DryRun: c.Bool("dry-run")}
	if usingMPI {
		plan.RanksPerNode = lp.RanksPerNode
	}
	if plan.Failpoint, err = testFailpoint(os.Getenv("KBUNDLE_TEST_FAILPOINT"), world.Rank()); err != nil {
		return l.fail(err.Error(), exitUsage)
	}
	sum, err := harvest.Run(c.Context, world, plan)
	if err != nil {
		if errors.Is(err, broadcast.ErrComm) || sum == nil {
			return cli.Exit(err.Error(), exitError)
		}
		return l.fail(err.Error(), exitError)
	}
	if !l.speaker {
		return nil
	}
	if c.Bool("json") {
		b, _ := json.Marshal(sum)
		fmt.Fprintln(c.App.Writer, string(b))
	}
	if !c.Bool("quiet") {
		for _, line := range loadcmd.HarvestReport(sum) {
			fmt.Fprintf(c.App.ErrWriter, "kbundle: %s\n", line)
		}
	}
	return nil
}

// testFailpoint is the harvest's failpoint for tests from
// $KBUNDLE_TEST_FAILPOINT, STEP:RANK or STEP:RANK:stop: world rank RANK
// kills itself with SIGKILL at STEP (harvest.Plan.Failpoint's steps:
// announce, transfer, written, published), or with stop sends itself
// SIGSTOP there (the test changes something, then sends SIGCONT). Empty:
// none.
func testFailpoint(v string, rank int) (func(string), error) {
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ":")
	r, err := -1, error(nil)
	if len(parts) == 2 || len(parts) == 3 {
		r, err = strconv.Atoi(parts[1])
	}
	steps := map[string]bool{"announce": true, "transfer": true, "written": true, "published": true}
	if len(parts) < 2 || len(parts) > 3 || !steps[parts[0]] || err != nil || r < 0 || len(parts) == 3 && parts[2] != "stop" {
		return nil, fmt.Errorf("KBUNDLE_TEST_FAILPOINT=%q: want STEP:RANK or STEP:RANK:stop, STEP one of announce, transfer, written, published", v)
	}
	sig := syscall.SIGKILL
	if len(parts) == 3 {
		sig = syscall.SIGSTOP
	}
	return func(step string) {
		if step == parts[0] && rank == r {
			syscall.Kill(os.Getpid(), sig)
		}
	}, nil
}
