package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/detect"
)

func init() {
	register(&cli.Command{
		Name:  "detect",
		Usage: "print which launcher started this process, its rank, and the cache mode",
		Description: "Reads only the environment (before any MPI call) and prints the decision kbundle\n" +
			"would act on. --json prints one line with the stable fields launcher, mpi, rank,\n" +
			"size, local_rank, local_size, node (-1 = unknown), mode and reason.\n" +
			"KBUNDLE_MODE=write|read|bundle|off overrides the mode, a hint for Go programs\n" +
			"that use package detect: kbundle's own commands ignore it. Under kbundle load and\n" +
			"kbundle harvest every job may compile new entries into DEST, whatever the mode, and\n" +
			"the harvest adds them to the set. See docs/launchers.md.\n\n" +
			"Exit status: 0 ok, 1 inconsistent launcher variables, 2 invalid KBUNDLE_MODE.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object on one line"},
		},
		Action: detectAction,
	})
}

func detectAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("detect takes no arguments, got %q", c.Args().Slice()), exitUsage)
	}
	// The mode first: an invalid KBUNDLE_MODE is a usage error whatever
	// the launcher variables say.
	r, derr := detect.FromEnviron()
	mode, err := detect.ModeFromEnv(os.LookupEnv, r)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	if derr != nil {
		return cli.Exit(derr.Error()+
			"\nkbundle: hint: a launcher variable is malformed or contradicts another; "+
			"inspect the environment the launcher gave this process (docs/launchers.md)", exitError)
	}
	out := detection{jsonHead: okHead(), Result: r, Mode: mode, Reason: r.Reason}
	if def := detect.DefaultMode(r); mode != def {
		out.Reason += fmt.Sprintf("; %s=%s overrides the default %s", detect.ModeEnv, mode, def)
	}
	if c.Bool("json") {
		return writeJSONLine(c.App.Writer, out)
	}
	return printDetection(c.App.Writer, out)
}

// detection is what `kbundle detect` prints: the launcher facts and the
// cache mode, whose override the reason mentions.
type detection struct {
	jsonHead
	detect.Result
	Mode   detect.Mode `json:"mode"`
	Reason string      `json:"reason"` // one line, for humans
}

// printDetection writes the short human-readable block.
func printDetection(w io.Writer, r detection) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	known := func(n int) string {
		if n == detect.Unknown {
			return "unknown"
		}
		return fmt.Sprint(n)
	}
	mpi := "no (a single process)"
	if r.MPI {
		mpi = fmt.Sprintf("yes, rank %d of %s", r.Rank, known(r.Size))
	}
	store := "no"
	if r.Mode.MayStore(r.Result) {
		store = "yes"
	}
	lines := []string{
		"launcher\t" + string(r.Launcher),
		"mpi\t" + mpi,
		fmt.Sprintf("local rank\t%s of %s", known(r.LocalRank), known(r.LocalSize)),
		"node\t" + known(r.Node),
		fmt.Sprintf("mode\t%s, for Go programs that read it with package detect (they store new entries: %s); kbundle's commands ignore it", r.Mode, store),
		"harvest\twhatever the mode, the framework compiles new entries into DEST, and kbundle harvest adds them to the set",
		"reason\t" + r.Reason,
	}
	if _, err := io.WriteString(tw, strings.Join(lines, "\n")+"\n"); err != nil {
		return err
	}
	return tw.Flush()
}
