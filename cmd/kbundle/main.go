// Command kbundle packs a compiled-kernel cache directory into one bundle
// file and loads it on every node of an MPI job. See docs/usage.md.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sort"

	"github.com/urfave/cli/v2"
)

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
func run(args []string) int {
	err := newApp().Run(args)
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
