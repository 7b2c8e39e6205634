package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/hostinfo"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/harvest"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/warmup"
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
	if world.Rank() == 0 && !plan.DryRun {
		plan.Meta = harvestMeta(fakeNodeDest(dest, lp.RanksPerNode, usingMPI))
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
		for _, line := range harvest.Report(sum) {
			fmt.Fprintf(c.App.ErrWriter, "kbundle: %s\n", line)
		}
		switch {
		case sum.DryRun:
			fmt.Fprintf(c.App.ErrWriter, "kbundle: dry run: would write %d files (%d cache units) to %s\n", sum.Files, sum.Units, path)
		case sum.Layer == "":
			fmt.Fprintf(c.App.ErrWriter, "kbundle: nothing new: no layer written to %s\n", path)
		default:
			what := "a new layer"
			if sum.Base {
				what = "the set's first bundle"
			}
			fmt.Fprintf(c.App.ErrWriter, "kbundle: wrote %s, %s: %d files (%d cache units, %s)\n", what, sum.Layer, sum.Files, sum.Units, sizeIEC(sum.Bytes))
		}
	}
	return nil
}

func sizeIEC(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

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
// (load.Plan.RanksPerNode: node 0's DEST.node0).
func fakeNodeDest(dest string, ranksPerNode int, usingMPI bool) string {
	if usingMPI && ranksPerNode > 0 {
		return dest + ".node0"
	}
	return dest
}
