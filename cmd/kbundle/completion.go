package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/preset"
	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script generated from the command definitions",
		UsageText: "kbundle completion bash|zsh|fish",
		Description: "bash: source it, or install it as share/bash-completion/completions/kbundle.\n" +
			"zsh: install it as _kbundle in a directory of $fpath (share/zsh/site-functions).\n" +
			"fish: install it as ~/.config/fish/completions/kbundle.fish (or share/fish/vendor_completions.d).\n" +
			"Each completes every name make build and make install give kbundle (" + completedNames + ").\n" +
			"make install PREFIX=... installs bash's and zsh's, and the man page (kbundle man).",
		Action: func(c *cli.Context) error {
			a, err := args(c, "SHELL")
			if err != nil {
				return err
			}
			app := newApp(nil, nil)
			switch a[0] {
			case "bash":
				return writeBash(c.App.Writer, app)
			case "zsh":
				return writeZsh(c.App.Writer, app)
			case "fish":
				return writeFish(c.App.Writer, app)
			}
			return cli.Exit(fmt.Sprintf("no completion for shell %q: want bash, zsh or fish", safe(a[0])), exitUsage)
		},
	})
}

// (No -o bashdefault: it would offer file names where the compspec
// offers nothing, after --timeout or --jobs.)

// binaryNames are the names kbundle is installed under (make build,
// make install, the wheel): kbundle, the front that runs the build
// matching the MPI (cmd/kbundle-front), and the builds themselves,
// kbundle-nompi, kbundle-openmpi, kbundle-mpich and kbundle-mpiabi.
// Every completion script registers all of them.
var binaryNames = []string{"kbundle", "kbundle-nompi", "kbundle-openmpi", "kbundle-mpich", "kbundle-mpiabi"}

var completedNames = strings.Join(binaryNames, ", ")

// shells are the shells `kbundle completion` writes for.
var shells = []string{"bash", "zsh", "fish"}

// valueKind is what a flag's value, or a command's argument, completes to.
type valueKind int

const (
	valueNone   valueKind = iota // a flag without a value
	valueFree                    // a number or a duration: nothing to offer
	valueWords                   // fixed words (preset and level names)
	valueDir                     // a directory
	valueBundle                  // a bundle file (*.kbundle), or a directory on the way to one
	valueFile                    // any file
)

// flagValue says what a flag's value completes to, and its words.
func flagValue(f cli.Flag) (valueKind, []string) {
	switch f.(type) {
	case *cli.BoolFlag:
		return valueNone, nil
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Float64Flag, *cli.DurationFlag:
		return valueFree, nil
	}
	switch f.Names()[0] {
	case "preset":
		var words []string
		for _, p := range preset.Presets() {
			words = append(words, p.Name)
		}
		return valueWords, words
	case "level":
		return valueWords, strings.FieldsFunc(bundle.LevelNames, func(r rune) bool { return r == ',' || r == '|' || r == ' ' })
	case "dir", "to", "stale":
		return valueDir, nil
	case "bundle":
		return valueBundle, nil
	case "timeout", "exclude", "older-than", "job", "user", "max-size", "gpu-arch":
		return valueFree, nil
	}
	return valueFile, nil
}

// argValue says what a command's arguments complete to.
func argValue(c *cli.Command) (valueKind, []string) {
	switch c.Name {
	case "info", "ls", "verify", "extract", "load", "merge":
		return valueBundle, nil
	case "clean", "status":
		return valueDir, nil
	case "completion":
		return valueWords, shells
	case "help":
		return valueWords, nil // the commands
	case "warm":
		return valueFile, nil
	}
	return valueFree, nil
}

// flagNames gives a flag's spellings, "--long" and "-s".
func flagNames(f cli.Flag) []string {
	var out []string
	for _, n := range f.Names() {
		out = append(out, dashed(n))
	}
	return out
}

// commandFlags are c's flags for completion: help is left out (every
// command has it, and the scripts add it once).
func commandFlags(c *cli.Command) []cli.Flag {
	var out []cli.Flag
	for _, f := range c.Flags {
		if f.Names()[0] != "help" {
			out = append(out, f)
		}
	}
	return out
}

func visible(app *cli.App) []*cli.Command {
	var out []*cli.Command
	for _, c := range app.Commands {
		if !c.Hidden {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func commandNames(app *cli.App) []string {
	var names []string
	for _, c := range visible(app) {
		names = append(names, c.Name)
	}
	return names
}

// bashReply is the bash statement completing $cur to a value of kind k.
func bashReply(k valueKind, words []string) string {
	switch k {
	case valueWords:
		return fmt.Sprintf("COMPREPLY=($(compgen -W '%s' -- \"$cur\"))", strings.Join(words, " "))
	case valueDir:
		return "COMPREPLY=($(compgen -d -- \"$cur\"))"
	case valueBundle:
		return "COMPREPLY=($(compgen -d -- \"$cur\"; compgen -f -X '!*.kbundle' -- \"$cur\"))"
	case valueFile:
		return "COMPREPLY=($(compgen -f -- \"$cur\"))"
	}
	return "COMPREPLY=()"
}

// writeBash writes a bash completion: command names, each command's
// flags, and for a flag's value or an argument what it takes (preset and
// level names, directories, bundle files, any file, or nothing for a
// number or a duration).
func writeBash(w io.Writer, app *cli.App) error {
	var b strings.Builder
	b.WriteString("# bash completion for " + completedNames + ", generated by `kbundle completion bash`.\n")
	b.WriteString("_kbundle() {\n\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i\n")
	b.WriteString("\tfor ((i = 1; i < COMP_CWORD; i++)); do\n\t\tcase ${COMP_WORDS[i]} in\n\t\t--) break ;;\n\t\t-*) ;;\n\t\t*) cmd=${COMP_WORDS[i]}; break ;;\n\t\tesac\n\tdone\n")
	b.WriteString("\tcase $prev in\n")
	seen := map[string]bool{}
	for _, c := range visible(app) {
		for _, f := range commandFlags(c) {
			k, words := flagValue(f)
			if k == valueNone || seen[f.Names()[0]] {
				continue
			}
			seen[f.Names()[0]] = true
			fmt.Fprintf(&b, "\t%s)\n\t\t%s; return ;;\n", strings.Join(flagNames(f), "|"), bashReply(k, words))
		}
	}
	b.WriteString("\tesac\n\tlocal words\n\tcase $cmd in\n")
	fmt.Fprintf(&b, "\t'') words='%s --help -h --version' ;;\n", strings.Join(commandNames(app), " "))
	for _, c := range visible(app) {
		var fl []string
		for _, f := range commandFlags(c) {
			fl = append(fl, flagNames(f)...)
		}
		fl = append(fl, "--help", "-h")
		fmt.Fprintf(&b, "\t%s) words='%s' ;;\n", c.Name, strings.Join(fl, " "))
	}
	b.WriteString("\tesac\n")
	b.WriteString("\tif [[ -z $cmd || $cur == -* ]]; then\n\t\tCOMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n\t\treturn\n\tfi\n")
	b.WriteString("\tcase $cmd in\n")
	for _, c := range visible(app) {
		k, words := argValue(c)
		if c.Name == "help" {
			words = commandNames(app)
		}
		fmt.Fprintf(&b, "\t%s) %s ;;\n", c.Name, bashReply(k, words))
	}
	b.WriteString("\tesac\n}\n")
	fmt.Fprintf(&b, "complete -o filenames -F _kbundle %s\n", strings.Join(binaryNames, " "))
	_, err := io.WriteString(w, b.String())
	return err
}

// zshQuote makes s safe inside a single-quoted _arguments spec.
func zshQuote(s string) string {
	s = strings.NewReplacer("'", `'\''`, "[", `\[`, "]", `\]`, ":", `\:`).Replace(s)
	return strings.ReplaceAll(s, "`", "")
}

// zshAction is the _arguments action completing a value of kind k.
func zshAction(k valueKind, what string, words []string) string {
	switch k {
	case valueWords:
		return ":" + what + ":(" + strings.Join(words, " ") + ")"
	case valueDir:
		return ":directory:_files -/"
	case valueBundle:
		return `:bundle:_files -g "*.kbundle"`
	case valueFile:
		return ":file:_files"
	}
	return ":" + what + ": "
}

// writeZsh writes a zsh completion function (_kbundle) with each
// command's flags and their descriptions.
func writeZsh(w io.Writer, app *cli.App) error {
	var b strings.Builder
	b.WriteString("#compdef " + strings.Join(binaryNames, " ") + "\n# zsh completion for " + completedNames + ", generated by `kbundle completion zsh`.\n\n_kbundle() {\n\tlocal -a commands\n\tcommands=(\n")
	for _, c := range visible(app) {
		fmt.Fprintf(&b, "\t\t'%s:%s'\n", c.Name, zshQuote(c.Usage))
	}
	b.WriteString("\t)\n\tif (( CURRENT == 2 )); then\n\t\t_describe -t commands 'kbundle command' commands\n\t\treturn\n\tfi\n")
	b.WriteString("\tlocal cmd=${words[2]}\n\tshift 1 words\n\t(( CURRENT-- ))\n\tcase $cmd in\n")
	b.WriteString("\thelp) _describe -t commands 'kbundle command' commands ;;\n")
	for _, c := range visible(app) {
		if c.Name == "help" {
			continue
		}
		fmt.Fprintf(&b, "\t%s)\n\t\t_arguments -s", c.Name)
		for _, f := range commandFlags(c) {
			usage := ""
			if d, ok := f.(cli.DocGenerationFlag); ok {
				_, usage = unquote(d.GetUsage())
			}
			action := ""
			if k, words := flagValue(f); k != valueNone {
				action = zshAction(k, f.Names()[0], words)
			}
			names := flagNames(f)
			rep := ""
			if _, ok := f.(*cli.StringSliceFlag); ok {
				rep = "*"
			}
			if len(names) == 1 {
				fmt.Fprintf(&b, " \\\n\t\t\t'%s%s[%s]%s'", rep, names[0], zshQuote(usage), action)
			} else {
				fmt.Fprintf(&b, " \\\n\t\t\t'%s(%s)'{%s}'[%s]%s'", rep, strings.Join(names, " "), strings.Join(names, ","), zshQuote(usage), action)
			}
		}
		b.WriteString(" \\\n\t\t\t'(- *)'{--help,-h}'[show help]'")
		switch k, words := argValue(c); {
		case c.Name == "warm":
			b.WriteString(" \\\n\t\t\t'*::command:_normal'")
		case k != valueFree:
			fmt.Fprintf(&b, " \\\n\t\t\t'*%s'", zshAction(k, "argument", words))
		}
		b.WriteString(" ;;\n")
	}
	b.WriteString("\tesac\n}\n\n_kbundle \"$@\"\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote makes s one single-quoted fish word.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

// fishArgs are the complete(1) options for a value of kind k.
func fishArgs(k valueKind, words []string) string {
	switch k {
	case valueWords:
		return " -x -a " + fishQuote(strings.Join(words, " "))
	case valueDir:
		return " -x -a '(__fish_complete_directories)'"
	case valueBundle:
		return " -x -a '(__fish_complete_suffix .kbundle)'"
	case valueFile:
		return " -r -F"
	}
	return " -x"
}

// writeFish writes a fish completion: the commands with their
// descriptions, and each command's flags with what their values take.
func writeFish(w io.Writer, app *cli.App) error {
	var b strings.Builder
	b.WriteString("# fish completion for " + completedNames + ", generated by `kbundle completion fish`.\n")
	names := strings.Join(commandNames(app), " ")
	for _, bin := range binaryNames {
		fmt.Fprintf(&b, "\n# %s\ncomplete -c %s -f\n", bin, bin)
		fmt.Fprintf(&b, "complete -c %s -s h -l help -d 'show help'\n", bin)
		fmt.Fprintf(&b, "complete -c %s -n 'not __fish_seen_subcommand_from %s' -l version -d %s\n", bin, names, fishQuote("print the version and the MPI library"))
		for _, c := range visible(app) {
			fmt.Fprintf(&b, "complete -c %s -n 'not __fish_seen_subcommand_from %s' -a %s -d %s\n", bin, names, c.Name, fishQuote(c.Usage))
		}
		for _, c := range visible(app) {
			cond := "-n '__fish_seen_subcommand_from " + c.Name + "'"
			for _, f := range commandFlags(c) {
				var opts string
				for _, n := range f.Names() {
					if len(n) == 1 {
						opts += " -s " + n
					} else {
						opts += " -l " + n
					}
				}
				usage := ""
				if d, ok := f.(cli.DocGenerationFlag); ok {
					_, usage = unquote(d.GetUsage())
				}
				k, words := flagValue(f)
				args := ""
				if k != valueNone {
					args = fishArgs(k, words)
				}
				fmt.Fprintf(&b, "complete -c %s %s%s%s -d %s\n", bin, cond, opts, args, fishQuote(usage))
			}
			k, words := argValue(c)
			if c.Name == "help" {
				words = commandNames(app)
			}
			if k != valueFree {
				fmt.Fprintf(&b, "complete -c %s %s%s\n", bin, cond, strings.Replace(fishArgs(k, words), " -r -F", " -F", 1))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
