package main

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
)

// TestLoadFlagsAreTheSettings: load's flags are made from
// loadcmd.Settings, each without EnvVars (loadcmd.Resolve reads the
// variable, so that a flag given wins over it) and its --help naming the
// variable.
func TestLoadFlagsAreTheSettings(t *testing.T) {
	var load *cli.Command
	for _, c := range commands {
		if c.Name == "load" {
			load = c
		}
	}
	if load == nil {
		t.Fatal("no load command")
	}
	flags := map[string]cli.Flag{}
	for _, f := range load.Flags {
		flags[f.Names()[0]] = f
	}
	for _, s := range loadcmd.Settings {
		if s.Flag == "" {
			continue
		}
		f, ok := flags[s.Flag]
		if !ok {
			t.Errorf("load has no --%s", s.Flag)
			continue
		}
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok && len(ev.GetEnvVars()) > 0 {
			t.Errorf("--%s binds %q itself", s.Flag, ev.GetEnvVars())
		}
		help := f.String()
		if s.Env != "" && !strings.Contains(help, "$"+s.Env) {
			t.Errorf("--%s's help %q does not name $%s", s.Flag, help, s.Env)
		}
		if s.Alias != "" && !strings.Contains(help, "-"+s.Alias+" ") {
			t.Errorf("--%s's help %q lacks -%s", s.Flag, help, s.Alias)
		}
	}
}
