package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kbundle/kbundle/preset"
	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "presets",
		Usage:     "list the framework presets and the variables each sets",
		UsageText: "kbundle presets [--json] [--verbose]",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "machine-readable output (fields are only ever added)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "also show each variable's source, what makes the cache miss, and notes"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("presets takes no arguments (got %q)", c.Args().First()), exitUsage)
			}
			if c.Bool("json") {
				return writePresetsJSON(c.App.Writer)
			}
			return writePresets(c.App.Writer, c.Bool("verbose"))
		},
	})
}

// presetJSON is the --json form of one preset: the table's fields plus the
// full variable list (includes resolved) for DIR.
type presetJSON struct {
	*preset.Preset
	Env []string `json:"env"` // NAME=VALUE with DIR standing for the cache directory
}

func writePresetsJSON(w io.Writer) error {
	var out []presetJSON
	for _, p := range preset.Presets() {
		out = append(out, presetJSON{Preset: p, Env: presetEnvTemplate(p)})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// presetEnvTemplate gives p's variables with "DIR" for the cache directory.
func presetEnvTemplate(p *preset.Preset) []string {
	var env []string
	for _, v := range p.AllVars() {
		val := v.Value
		if v.Dir {
			val = "DIR/" + v.Value
		}
		env = append(env, v.Name+"="+val)
	}
	return env
}

func writePresets(w io.Writer, verbose bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PRESET\tFRAMEWORK\tVARIABLES (DIR: the cache directory)")
	for _, p := range preset.Presets() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.Framework, strings.Join(presetEnvTemplate(p), " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !verbose {
		var ro []string
		for _, p := range preset.Presets() {
			if p.Writable {
				ro = append(ro, p.Name)
			}
		}
		fmt.Fprintf(w, "\nThe loaded copy must stay writable (%s fail with a read-only cache).\nkbundle presets -v: sources, what makes each cache miss, notes; see docs/presets.md.\n", strings.Join(ro, ", "))
		return nil
	}
	for _, p := range preset.Presets() {
		fmt.Fprintf(w, "\n%s (%s), in DIR/%s", p.Name, p.Framework, p.Subdir)
		if len(p.Includes) > 0 {
			fmt.Fprintf(w, ", includes %s", strings.Join(p.Includes, ", "))
		}
		fmt.Fprintln(w)
		for _, v := range p.Vars {
			fmt.Fprintf(w, "  %s: %s\n    source: %s\n", v.Name, v.Doc, v.Source)
		}
		for _, m := range p.Misses {
			fmt.Fprintf(w, "  misses: %s\n", m)
		}
		for _, n := range p.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		if p.Writable {
			fmt.Fprintln(w, "  the loaded copy must be writable")
		}
	}
	return nil
}
