package main

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
)

// TestCommandsShareSettings: load, harvest, status and clean leave the
// variables of loadcmd.Settings to the front door, which reads each the
// same way for all of them: no flag of theirs named like a setting reads
// its variable itself (urfave's EnvVars: a variable would then pass for
// the flag, as KBUNDLE_CACHE_DIR passed for harvest's --dir), and each
// names the variable in its help. testdata/script/settings.txt holds the
// behaviour to it.
func TestCommandsShareSettings(t *testing.T) {
	env := map[string]string{}
	for _, s := range loadcmd.Settings {
		if s.Flag != "" && s.Env != "" {
			env[s.Flag] = s.Env
		}
	}
	seen := map[string]bool{}
	for _, c := range commands {
		switch c.Name {
		case "load", "harvest", "status", "clean":
		default:
			continue
		}
		seen[c.Name] = true
		for _, f := range c.Flags {
			v := env[f.Names()[0]]
			d, ok := f.(cli.DocGenerationFlag)
			if v == "" || !ok {
				continue
			}
			if len(d.GetEnvVars()) > 0 {
				t.Errorf("%s --%s reads %v itself: leave %s to loadcmd", c.Name, f.Names()[0], d.GetEnvVars(), v)
			}
			if !strings.Contains(d.GetUsage(), "[$"+v+"]") {
				t.Errorf("%s --%s: its help does not name $%s: %q", c.Name, f.Names()[0], v, d.GetUsage())
			}
		}
	}
	if len(seen) != 4 {
		t.Errorf("commands found: %v", seen)
	}
}
