// Command kbundle packs a compiled-kernel cache directory into one bundle
// file and loads it on every node of an MPI job. See docs/usage.md.
//
// Each command lives in the file of its name (pack.go, info.go, ...).
// What several commands share lives in a file named for what it is:
// flags.go (flag definitions), args.go (flags after arguments), open.go
// (opening the bundle argument), errors.go (exit statuses and hints),
// json.go (the one schema of --json: its head, the error object, the
// canonical names), output.go (formatting and escaping), progress.go (progress display) and
// presets.go (the presets command and --preset parsing), help.go (the
// help command, usage errors and "did you mean" suggestions) and man.go
// (the man page). Every command
// writes through the app's Writer and ErrWriter, so that run can be
// called in process with any writers.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/bundle"
	kbversion "github.com/kbundle/kbundle/internal/version"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/warmup"
)

// signalGrace is how long a command has to stop by itself after a signal;
// signalLastWait how long its extraction workers then still get.
const (
	signalGrace    = 3 * time.Second
	signalLastWait = 500 * time.Millisecond
)

// Exit codes, documented in docs/commands/README.md and in --help.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitUnusable = 3 // bundle missing, damaged or untrusted
)

// docsURL is where an installed binary's users find the documentation.
const docsURL = "https://github.com/kbundle/kbundle/blob/main/docs/usage.md"

// commands is filled by each command's file.
var commands []*cli.Command

// register adds a command; a bad flag of a command is a usage error.
func register(c *cli.Command) {
	if c.OnUsageError == nil {
		c.OnUsageError = usageError
	}
	commands = append(commands, c)
}

func init() {
	// -v means --verbose in the commands that have it, never --version.
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and the MPI library"}
	cli.VersionPrinter = func(c *cli.Context) { printVersion(c.App.Writer, false) }
}

// version is kbundle's version (package version: what make links in).
func version() string { return kbversion.String() }

// newApp builds the CLI definition, writing to stdout and stderr. The man
// page and the shell completion are generated from it too.
func newApp(stdout, stderr io.Writer) *cli.App {
	sort.Slice(commands, func(i, j int) bool { return commands[i].Name < commands[j].Name })
	return &cli.App{
		Name:      "kbundle",
		HelpName:  "kbundle",
		Usage:     "start an MPI job with a warm compiled-kernel cache",
		UsageText: "kbundle COMMAND [flags] [arguments]\nkbundle help COMMAND",
		Version:   version(),
		Description: "Exit status: 0 ok, 1 error, 2 usage error, 3 bundle unusable " +
			"(missing, damaged or untrusted). Flags may come before or after arguments.\n" +
			"Documentation: " + docsURL,
		Commands:  commands,
		Flags:     []cli.Flag{cli.HelpFlag}, // urfave/cli adds it only with its own help command
		Writer:    stdout,
		ErrWriter: stderr,
		Action: func(c *cli.Context) error { // reached without a command, or with an unknown one
			if c.NArg() > 0 {
				return unknownCommand(c.App, c.Args().First())
			}
			return cli.Exit("usage: kbundle COMMAND [flags] [arguments] (see kbundle --help)", exitUsage)
		},
		ExitErrHandler: func(*cli.Context, error) {}, // run prints and exits
		OnUsageError:   usageError,
	}
}

func main() {
	mpi.Exit(run(os.Args, os.Stdout, os.Stderr)) // through the C library once MPI ran: see mpi.Exit
}

// interrupted is the cause of a command's cancellation by a signal. It
// matches context.Canceled, so code that checks for cancellation sees it,
// and says which signal, so a load's agreed failure names it.
type interrupted struct{ sig syscall.Signal }

func (e interrupted) Error() string { return "interrupted by " + warmup.SignalName(e.sig) }

func (interrupted) Is(target error) bool { return target == context.Canceled }

// run executes the CLI with args (args[0] is the program name) and maps
// errors to exit codes; every message is printed once to stderr as
// "kbundle: ...", and under --json a failure's error object on stdout
// (execute).
//
// SIGTERM, SIGINT and SIGHUP (scancel, a time limit, Ctrl-C) cancel the
// command's context: it stops, removes what it wrote and run returns
// 128+N; a command that had already passed its last point of no return
// completes and its success is reported as usual. A command that cannot stop at once (one blocked in an MPI call)
// is given signalGrace; then its temporary files and trees are removed
// and the process exits 128+N.
func run(args []string, stdout, stderr io.Writer) int {
	code, msg := execute(args, stdout, stderr)
	if msg != "" {
		fmt.Fprintf(stderr, "kbundle: %s\n", msg)
	}
	return code
}

// execute is run without printing the final message: it returns the exit
// status and the message ("" for none), so that the tests can check the
// message's shape (one line of what happened, then at most one hint).
func execute(args []string, stdout, stderr io.Writer) (int, string) {
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var got atomic.Int32
	// A collective command's rank that does not speak: rank 0 reports a
	// signal for every rank, so it stays silent about it (issue 25, U46).
	quiet := new(atomic.Bool)
	// A collective command's rank 0 says at once that it is stopping,
	// before its clean-up: Open MPI's mpirun may SIGKILL the ranks a few
	// seconds after the signal it forwards, before the final line (U49).
	announce := new(atomic.Bool)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		n := int(sig.(syscall.Signal))
		if announce.Load() {
			fmt.Fprintf(stderr, "kbundle: %s: stopping; what this run wrote is removed\n", interrupted{syscall.Signal(n)})
		}
		got.Store(int32(n))
		stop(interrupted{sig.(syscall.Signal)})
		time.Sleep(signalGrace)
		// The extractions were cancelled signalGrace ago: a short last
		// wait, so that grace and clean-up end within a batch system's
		// kill wait (Slurm's KillWait, often 5 s; TestScancel).
		bundle.RemoveTempsWithin(signalLastWait)
		if !quiet.Load() {
			fmt.Fprintf(stderr, "kbundle: %s; stopped\n", interrupted{syscall.Signal(n)})
		}
		os.Exit(128 + n)
	}()
	out := &countingWriter{w: stdout}
	app := newApp(out, stderr)
	app.Metadata = map[string]any{"args": args, metaQuietSignal: quiet, metaAnnounceSignal: announce}
	args = flagsFirst(app, args)
	err := app.RunContext(ctx, args)
	code, msg := exitStatus(err, int(got.Load()), quiet.Load())
	// Under --json, a failure is an object on stdout too, for every
	// command: the error object, unless the command printed its own
	// (status and clean report what failed in theirs; load's rank 0
	// prints it before MPI_Finalize) or is not the one that speaks.
	if code != exitOK && out.n == 0 && app.Metadata[metaMuted] != true && jsonRequested(app, args) {
		writeFailureJSON(stdout, code, msg, err)
	}
	return code, msg
}

// metaQuietSignal holds, in the app's Metadata, the *atomic.Bool that a
// collective command sets on the ranks that do not speak (loader's
// setSpeaker): a signal then stops them without a line of their own.
const metaQuietSignal = "quiet-signal"

// metaAnnounceSignal holds the *atomic.Bool that a collective command
// sets on the rank that speaks: it says at once that a signal stops the
// job, before the clean-up that the launcher may cut short.
const metaAnnounceSignal = "announce-signal"

// exitStatus is the exit status and the final message of a command that
// returned err, signal n (0: none) having come meanwhile; quiet: this
// rank leaves saying the signal to rank 0 (no message).
func exitStatus(err error, n int, quiet bool) (int, string) {
	// A command that finished despite the signal (it came after the last
	// point where it could stop: pack's rename, say) did its work: that is
	// reported as success, never as "stopped" (S8).
	if n != 0 && err != nil {
		bundle.RemoveTemps()
		if quiet {
			return 128 + n, ""
		}
		return 128 + n, interrupted{syscall.Signal(n)}.Error() + "; stopped"
	}
	if err == nil {
		return exitOK, ""
	}
	code := exitError
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		code = ec.ExitCode()
	}
	return code, hideTemps(err.Error())
}

// tempName matches the name of one of kbundle's temporaries
// (DIR/.NAME.kbundle-tmp-HOST-PID-RANDOM), as an error from the operating
// system quotes it, with the operation before it.
var tempName = regexp.MustCompile(`(?:(open|mkdir|mkdirat|openat|rename|remove|unlinkat|lstat|stat) )?(\S*?)/?\.[^\s/]*kbundle-tmp-[^\s:/]*`)

// hideTemps replaces, in a final message, the names of kbundle's
// temporaries with the directory they were in: the user never made them
// and cannot act on them.
func hideTemps(msg string) string {
	return tempName.ReplaceAllStringFunc(msg, func(m string) string {
		sub := tempName.FindStringSubmatch(m)
		dir := sub[2]
		if dir == "" {
			dir = "."
		}
		switch sub[1] {
		case "open", "openat", "mkdir", "mkdirat":
			return "cannot create a temporary in " + dir
		}
		return "a temporary in " + dir
	})
}
