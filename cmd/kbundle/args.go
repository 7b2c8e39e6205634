package main

import (
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst moves a command's flags in front of its arguments, so that
// `kbundle extract FILE DEST --force` parses like `kbundle extract --force
// FILE DEST` (urfave/cli stops at the first argument). Everything after
// "--" stays an argument. Commands that run another program (warm: its
// CMD's flags are its own) are left alone, as is anything before the
// command's name. ls's -h is rewritten to --human-readable (lsHuman).
func flagsFirst(app *cli.App, args []string) []string {
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		i++ // global flags
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil || cmd.SkipFlagParsing || cmd.Name == "warm" || cmd.Name == "help" {
		return args
	}
	takesValue := valueFlags(cmd)
	var flags, rest []string
	dashdash := false
	tail := args[i+1:]
	for k := 0; k < len(tail); k++ {
		a := tail[k]
		switch {
		case a == "--":
			dashdash = true
			rest = append(rest, tail[k+1:]...)
			k = len(tail)
		case cmd.Name == "ls" && (a == "-h" || a == "-lh" || a == "-hl"):
			flags = append(flags, lsHuman(a)...)
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && k+1 < len(tail) {
				k++
				flags = append(flags, tail[k])
			}
		default:
			rest = append(rest, a)
		}
	}
	out := append(append([]string{}, args[:i+1]...), flags...)
	if dashdash {
		out = append(out, "--")
	}
	return append(out, rest...)
}

// valueFlags are the names of cmd's flags that take a value.
func valueFlags(cmd *cli.Command) map[string]bool {
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	return takesValue
}

// jsonRequested reports whether args, as flagsFirst left them, give a
// command that has --json a true one: the error object is printed for a
// failure before the command ran too (a bad flag, a missing argument).
func jsonRequested(app *cli.App, args []string) bool {
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		i++ // global flags
	}
	if i >= len(args) {
		return false
	}
	cmd := app.Command(args[i])
	if cmd == nil || findFlag(cmd.Flags, "json") == nil {
		return false
	}
	takesValue, on := valueFlags(cmd), false
	for k := i + 1; k < len(args); k++ {
		a := args[k]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break // the arguments: flagsFirst put every flag before them
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "json" && hasVal:
			on, _ = strconv.ParseBool(val)
		case name == "json":
			on = true
		case !hasVal && takesValue[name]:
			k++ // its value
		}
	}
	return on
}
