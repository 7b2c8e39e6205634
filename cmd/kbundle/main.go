// Command kbundle packs a compiled-kernel cache directory into one bundle
// file and loads it on every node of an MPI job. See docs/usage.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/bundle"
)

// signalGrace is how long a command has to stop by itself after a signal.
const signalGrace = 3 * time.Second

// Exit codes, documented in docs/usage.md and in --help.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitUnusable = 3 // bundle missing, damaged or untrusted
)

// commands is filled by each command's file (one file per command).
var commands []*cli.Command

func register(c *cli.Command) {
	if c.OnUsageError == nil { // a bad flag of a command is a usage error too
		c.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return cli.Exit(err.Error(), exitUsage) }
	}
	commands = append(commands, c)
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func newApp() *cli.App {
	sort.Slice(commands, func(i, j int) bool { return commands[i].Name < commands[j].Name })
	return &cli.App{
		Name:    "kbundle",
		Usage:   "start an MPI job with a warm compiled-kernel cache",
		Version: version(),
		Description: "Exit status: 0 ok, 1 error, 2 usage error, 3 bundle unusable " +
			"(missing, damaged or untrusted). See docs/usage.md.",
		Commands:        commands,
		HideHelpCommand: true,
		Action: func(c *cli.Context) error { // reached with an unknown command
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("unknown command %q (see kbundle --help)", c.Args().First()), exitUsage)
			}
			return cli.ShowAppHelp(c)
		},
		ExitErrHandler: func(*cli.Context, error) {}, // main prints and exits
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return cli.Exit(err.Error(), exitUsage)
		},
	}
}

func main() {
	os.Exit(run(os.Args))
}

// run executes the CLI and maps errors to exit codes; every message is
// printed once to stderr as "kbundle: ...".
//
// SIGTERM, SIGINT and SIGHUP (scancel, a time limit, Ctrl-C) cancel the
// command's context: it stops, removes what it wrote and run returns
// 128+N. A command that cannot stop at once (one blocked in an MPI call)
// is given signalGrace; then its temporary files and trees are removed
// and the process exits 128+N.
func run(args []string) int {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var got atomic.Int32
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		n := int(sig.(syscall.Signal))
		got.Store(int32(n))
		stop()
		time.Sleep(signalGrace)
		bundle.RemoveTemps()
		fmt.Fprintf(os.Stderr, "kbundle: %s: stopped\n", sig)
		os.Exit(128 + n)
	}()
	err := newApp().RunContext(ctx, args)
	if n := got.Load(); n != 0 {
		bundle.RemoveTemps()
		fmt.Fprintf(os.Stderr, "kbundle: %s: stopped\n", syscall.Signal(n))
		return 128 + int(n)
	}
	if err == nil {
		return exitOK
	}
	code := exitError
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		code = ec.ExitCode()
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintf(os.Stderr, "kbundle: %s\n", msg)
	}
	return code
}
