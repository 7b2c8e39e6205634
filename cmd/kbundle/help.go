package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "help",
		Usage:     "show the commands, or one command's help",
		UsageText: "kbundle help [COMMAND]",
		Action: func(c *cli.Context) error {
			switch c.NArg() {
			case 0:
				return cli.ShowAppHelp(c)
			case 1:
			default:
				return cli.Exit("usage: "+c.Command.UsageText, exitUsage)
			}
			name := c.Args().First()
			if c.App.Command(name) == nil {
				return unknownCommand(c.App, name)
			}
			if cmd := c.App.Command(name); cmd.HideHelp { // ls: its -h is not help
				cli.HelpPrinter(c.App.Writer, cli.CommandHelpTemplate, cmd)
				return nil
			}
			return cli.ShowCommandHelp(c.Lineage()[1], name)
		},
	})
	// Boolean flags do not say "(default: false)".
	plain := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string {
		s := plain(f)
		if _, ok := f.(*cli.BoolFlag); ok {
			s = strings.Replace(s, " (default: false)", "", 1)
		}
		return s
	}
}

// unknownCommand is the usage error for a command name that is not one,
// with the nearest name as a hint.
func unknownCommand(app *cli.App, name string) error {
	msg := fmt.Sprintf("unknown command %q (see kbundle --help)", safe(name))
	var names []string
	for _, c := range app.Commands {
		if !c.Hidden {
			names = append(names, c.Name)
		}
	}
	if s := nearest(name, names); s != "" {
		msg += fmt.Sprintf("\nkbundle: hint: did you mean kbundle %s?", s)
	}
	return cli.Exit(msg, exitUsage)
}

// nearest returns the name closest to typed: one it is a unique prefix
// of, else the only one within a small edit distance (one edit for short
// names, two from five letters); "" when none is close or several are.
func nearest(typed string, names []string) string {
	var prefixed []string
	for _, n := range names {
		if strings.HasPrefix(n, typed) && typed != "" {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	limit := 1
	if len(typed) >= 5 {
		limit = 2
	}
	best, bestD, ties := "", limit+1, 0
	for _, n := range names {
		switch d := editDistance(typed, n); {
		case d < bestD:
			best, bestD, ties = n, d, 1
		case d == bestD:
			ties++
		}
	}
	if ties != 1 {
		return ""
	}
	return best
}

// editDistance is the optimal-string-alignment distance between a and b:
// insertions, deletions, substitutions and swaps of neighbours.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

var (
	reNotDefined = regexp.MustCompile(`^flag provided but not defined: -(\S+)$`)
	reNeedsValue = regexp.MustCompile(`^flag needs an argument: -+(\S+)$`)
	reBadValue   = regexp.MustCompile(`^invalid value "(.*)" for flag -+(\S+): (.*)$`)
	reBadEnv     = regexp.MustCompile(`^could not parse "(.*)" (?:as \w+ value )?from environment variable "(\w+)" (?:as value )?for flag (\S+): (.*)$`)
)

// usageError turns urfave/cli's flag errors into exit 2: flags spelled
// --name (-n for a one-letter one; an unknown flag as the user typed it),
// no strconv internals, the nearest flag as a hint, and a pointer to the
// command's help.
func usageError(c *cli.Context, err error, _ bool) error {
	msg, hint := err.Error(), ""
	flags := c.App.Flags
	see := "kbundle --help"
	if c.Command != nil && c.Command.Name != "" && c.Command.Name != c.App.Name {
		flags = c.Command.Flags
		see = "kbundle " + c.Command.Name + " --help"
	}
	if m := reNotDefined.FindStringSubmatch(msg); m != nil {
		name := m[1]
		typed, _ := c.App.Metadata["args"].([]string)
		for _, a := range typed {
			if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
				msg = "flag provided but not defined: --" + name
				break
			}
		}
		var names []string
		for _, f := range flags {
			names = append(names, f.Names()...)
		}
		if s := nearest(name, names); s != "" {
			hint = "did you mean " + dashed(s) + "?"
		}
	} else if m := reNeedsValue.FindStringSubmatch(msg); m != nil {
		msg = "flag " + dashed(m[1]) + " needs a value"
	} else if m := reBadValue.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("invalid value %q for %s: %s", m[1], dashed(m[2]), why(findFlag(flags, m[2]), m[3]))
	} else if m := reBadEnv.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("%s=%q (for %s): %s", m[2], m[1], dashed(m[3]), why(findFlag(flags, m[3]), m[4]))
		hint = fmt.Sprintf("set %s to a valid value, or unset it", m[2])
	}
	msg += " (see " + see + ")"
	if hint != "" {
		msg += "\nkbundle: hint: " + hint
	}
	return cli.Exit(msg, exitUsage)
}

// dashed spells a flag name as on the command line: -j, --jobs.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// why says what is wrong with a flag's value in the user's terms rather
// than the parser's ("strconv.ParseInt: parsing ...", "parse error").
func why(f cli.Flag, reason string) string {
	if !strings.HasPrefix(reason, "strconv.") && reason != "parse error" {
		return reason
	}
	switch f.(type) {
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
		return "not a whole number"
	case *cli.BoolFlag:
		return "not true or false"
	case *cli.Float64Flag:
		return "not a number"
	}
	return "not a valid value"
}
