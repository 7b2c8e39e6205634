package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "man",
		Usage:     "print kbundle's man page (roff), generated from the command definitions",
		UsageText: "kbundle man > kbundle.1",
		Description: "make install PREFIX=... installs it as share/man/man1/kbundle.1.\n" +
			"Its ENVIRONMENT section lists every KBUNDLE_ variable, as docs/environment.md does.",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit("usage: "+c.Command.UsageText, exitUsage)
			}
			_, err := io.WriteString(c.App.Writer, manPage(newApp(nil, nil)))
			return err
		},
	})
}

// envVar is an environment variable kbundle reads that is not bound to a
// flag (those are listed from the flags' EnvVars).
type envVar struct{ name, meaning string }

// otherEnv are the variables kbundle reads that no flag is bound to. The
// man page's ENVIRONMENT lists them with the flags' variables, and a test
// checks that docs/environment.md's table has the same KBUNDLE_ names.
var otherEnv = []envVar{
	{"KBUNDLE_TRUSTED_GROUPS", "groups whose write permission the trust check accepts, for shared bundles (names or numeric ids, comma- or space-separated; empty by default)"},
	{"KBUNDLE_TRUSTED_OWNERS", "users whose ownership the trust check accepts (names or numeric ids; empty by default)"},
	{"KBUNDLE_BUILD", "read by the front that is installed as kbundle: run this build (none, openmpi, mpich or mpi-abi: kbundle-nompi, kbundle-openmpi, kbundle-mpich, kbundle-mpiabi beside it) instead of the one that matches the launcher"},
	{"KBUNDLE_MODE", "cache mode (write, read, bundle, off) for applications that use package detect; kbundle detect shows it"},
	{"KBUNDLE_NO_PROGRESS", "1 (any true value): no progress display at all"},
	{"KBUNDLE_PROGRESS_INTERVAL", "when stderr is not a terminal, how often pack, verify and extract print a progress line (a Go duration, default 10s)"},
	{"KBUNDLE_BCAST_CHUNK", "testing knob: bytes per broadcast call of load, read on rank 0 only (default 8 MiB)"},
	{"KBUNDLE_TEST_RANKS_PER_NODE", "testing knob: every N consecutive ranks of load form one node, extracting to DEST.node<k>"},
	{"KBUNDLE_TEST_FAILPOINT", "testing knob: STEP:RANK makes harvest's world rank RANK kill itself (SIGKILL) at STEP (announce, transfer, written, claimed, published); STEP:RANK:wait=FILE makes it create FILE.reached there and wait for FILE instead"},
	{"SOURCE_DATE_EPOCH", "content time recorded by pack, for reproducible bundles"},
	{"TMPDIR", "node-local directory of the default DEST of load"},
}

// boundEnv maps each variable bound to a flag to the flag and the
// commands that have it, in command order.
func boundEnv(app *cli.App) map[string]struct {
	flag cli.DocGenerationFlag
	cmds []string
} {
	out := map[string]struct {
		flag cli.DocGenerationFlag
		cmds []string
	}{}
	for _, c := range app.Commands {
		for _, f := range c.Flags {
			d, ok := f.(cli.DocGenerationFlag)
			if !ok {
				continue
			}
			for _, e := range flagEnv(c, d) {
				v := out[e]
				if v.flag == nil {
					v.flag = d
				}
				v.cmds = append(v.cmds, c.Name)
				out[e] = v
			}
		}
	}
	return out
}

// flagEnv is the variables of command c's flag d: its EnvVars, or for
// load's flags, which loadcmd.Settings makes without EnvVars
// (loadcmd.Resolve reads the variables), the setting's.
func flagEnv(c *cli.Command, d cli.DocGenerationFlag) []string {
	if e := d.GetEnvVars(); len(e) > 0 || c.Name != "load" {
		return e
	}
	for _, s := range loadcmd.Settings {
		if s.Flag != "" && s.Flag == d.Names()[0] && s.Env != "" {
			return []string{s.Env}
		}
	}
	return nil
}

// roff escapes s for a roff text line.
func roff(s string) string {
	s = strings.NewReplacer(`\`, `\e`, "-", `\-`, "`", "").Replace(s)
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = `\&` + l
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// flagTerm is a flag's .TP term: its names, bold, and its placeholder.
func flagTerm(f cli.DocGenerationFlag) string {
	place, _ := unquote(f.GetUsage())
	if place == "" && f.TakesValue() {
		place = "VALUE"
	}
	var names []string
	for _, n := range flagNames(f) {
		t := `\fB` + strings.ReplaceAll(n, "-", `\-`) + `\fP`
		if place != "" {
			t += ` \fI` + place + `\fP`
		}
		names = append(names, t)
	}
	return strings.Join(names, ", ")
}

// flagText is a flag's description: its usage, its default when that
// says something (never "false" or an empty one), its variable.
func flagText(f cli.DocGenerationFlag) string {
	_, usage := unquote(f.GetUsage())
	if _, isBool := f.(*cli.BoolFlag); !isBool && f.TakesValue() {
		if d := f.GetDefaultText(); d == "" {
			if v := f.GetValue(); v != "" && v != "0" && v != "[]" {
				usage += " (default: " + v + ")"
			}
		}
	}
	if env := f.GetEnvVars(); len(env) > 0 {
		usage += " [$" + strings.Join(env, ", $") + "]"
	}
	return usage
}

// manPage renders app as a section-1 man page: NAME, SYNOPSIS,
// DESCRIPTION, COMMANDS (each with its usage, description and flags),
// ENVIRONMENT, EXIT STATUS, EXAMPLES and SEE ALSO.
func manPage(app *cli.App) string {
	var b strings.Builder
	b.WriteString(".nh\n.TH KBUNDLE 1\n.SH NAME\nkbundle \\- " + roff(app.Usage))
	b.WriteString(".SH SYNOPSIS\n\\fBkbundle\\fP \\fICOMMAND\\fP [\\fIflags\\fP] [\\fIarguments\\fP]\n.br\n\\fBkbundle help\\fP \\fICOMMAND\\fP\n")
	b.WriteString(".SH DESCRIPTION\n" + roff("kbundle packs a compiled-kernel cache directory (Triton, Inductor, Numba, ...) "+
		"into one bundle file, and loads it on every node of an MPI job: rank 0 reads it once and broadcasts it, "+
		"one rank per node extracts it to node-local storage. Flags may come before or after arguments; "+
		"after -- everything is an argument."))
	b.WriteString(".SH COMMANDS\n")
	for _, c := range visible(app) {
		b.WriteString(".SS " + c.Name + "\n" + roff(c.Usage))
		usage := c.UsageText
		if usage == "" {
			usage = "kbundle " + c.Name
		}
		b.WriteString(".PP\n.EX\n" + roff(usage) + ".EE\n")
		if c.Description != "" {
			b.WriteString(".PP\n" + roff(c.Description))
		}
		for _, f := range commandFlags(c) {
			if d, ok := f.(cli.DocGenerationFlag); ok {
				b.WriteString(".TP\n" + flagTerm(d) + "\n" + roff(flagText(d)))
			}
		}
	}
	b.WriteString(".SH ENVIRONMENT\nA flag given on the command line wins over its variable.\n")
	bound := boundEnv(app)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range bound {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		v := bound[n]
		_, usage := unquote(v.flag.GetUsage())
		fmt.Fprintf(&b, ".TP\n.B %s\n%s", n, roff(fmt.Sprintf("%s of %s: %s", dashed(v.flag.Names()[0]), strings.Join(v.cmds, ", "), usage)))
	}
	other := slices.Clone(otherEnv)
	sort.SliceStable(other, func(i, j int) bool { return other[i].name < other[j].name })
	for _, e := range other {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s", e.name, roff(e.meaning))
	}
	b.WriteString(".SH EXIT STATUS\n")
	for _, s := range exitStatuses {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s", s[0], roff(s[1]))
	}
	b.WriteString(".SH BACKWARDS COMPATIBILITY\n" + roff("Every --json object (but presets' list) carries schema_version (1) and ok; within a "+
		"schema version fields are only ever added, and kbundle promises no breaking change within version 1. Under --json a "+
		"failure prints an error object on stdout (ok false, kind, reason, hint, exit_status); the exit status and stderr are "+
		"those without --json. docs/json-schema.json describes every object; json.md names them."))
	b.WriteString(".SH EXAMPLES\n")
	for _, e := range manExamples {
		b.WriteString(".PP\n" + roff(e[0]) + ".PP\n.RS\n.EX\n" + roff(e[1]) + ".EE\n.RE\n")
	}
	b.WriteString(".SH SEE ALSO\n" + roff("mpirun(1), srun(1), sbcast(1); kbundle COMMAND --help; the documentation at "+docsURL+
		" (usage.md, commands/, json.md, environment.md, presets.md, slurm.md, pbs.md, troubleshooting.md, FORMAT.md)."))
	return b.String()
}

// exitStatuses are kbundle's exit statuses, as docs/commands/README.md's table has
// them per command.
var exitStatuses = [][2]string{
	{"0", "success"},
	{"1", "an error: the destination, an I/O error, a failure of the job"},
	{"2", "a usage error: a bad flag, argument or KBUNDLE_ variable"},
	{"3", "the bundle is unusable: missing, damaged, truncated, hostile, of a newer version, or untrusted"},
	{"4", "warm --check: the cache was not reused"},
	{"128+N", "signal N (SIGTERM, SIGINT, SIGHUP) stopped kbundle; what it was writing is removed"},
	{"126, 127", "warm: CMD cannot be run, or is not found (otherwise warm exits with CMD's status)"},
}

// manExamples are the man page's EXAMPLES: what it does, then the
// commands.
var manExamples = [][2]string{
	{"Fill a cache with one warm-up run on local storage, and pack it:",
		"kbundle warm --dir /tmp/$USER/cache --preset triton --pack -o ~/cache.kbundle -- python warmup.py"},
	{"In every job (Open MPI): load it with one rank per node, then pass the printed variables to the application:",
		"mpirun --map-by ppr:1:node kbundle load --bundle ~/cache.kbundle --print-env > kenv.sh\n. ./kenv.sh\nmpirun -np 64 -x TRITON_CACHE_DIR python train.py"},
	{"Check a bundle, and list what it holds for Numba, with human sizes:",
		"kbundle verify --deep ~/cache.kbundle\nkbundle ls -l -h ~/cache.kbundle numba/"},
	{"Install the completion for your shell:",
		"kbundle completion bash > ~/.local/share/bash-completion/completions/kbundle"},
}

// unquote splits a flag's usage into its placeholder (the back-quoted
// word, as urfave/cli reads it) and the text without the quotes.
func unquote(usage string) (place, text string) {
	if i := strings.IndexByte(usage, '`'); i >= 0 {
		if j := strings.IndexByte(usage[i+1:], '`'); j >= 0 {
			place = usage[i+1 : i+1+j]
			return place, usage[:i] + place + usage[i+1+j+1:]
		}
	}
	return "", usage
}
