package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
)

// bundleArgs are the bundles a reader (info, ls, verify, extract, merge)
// is to read: the n arguments given (n: how many of the command's
// leading arguments are bundles; -1: all), or, when none is given, the
// one loadcmd.DefaultBundle names ($KBUNDLE_BUNDLE, else
// $KBUNDLE_CACHE_DIR/cache.kbundle), as load reads it. Each names a
// bundle file or a set's base; a directory gets the hint that names its
// cache.kbundle (dirAsBundle), whichever command reads it.
func bundleArgs(c *cli.Context, given []string) ([]string, error) {
	if len(given) == 0 {
		b := loadcmd.DefaultBundle(os.Getenv)
		if b == "" {
			return nil, cli.Exit(loadcmd.NoBundle+" (usage: "+c.Command.UsageText+")", exitUsage)
		}
		given = []string{b}
	}
	for _, name := range given {
		if err := dirAsBundle(name, ""); err != nil {
			return nil, err
		}
	}
	return given, nil
}

// dirAsBundle is the error of a directory passed where a bundle file
// belongs, with the hint naming the bundle file it probably holds (and
// alt, a command's other way to name it: "--dir DIR"; "": none), exit 3
// as for any path that is not a bundle; nil when name is not a directory
// (the reader's own error, if any, stands).
func dirAsBundle(name, alt string) error {
	fi, err := os.Stat(name)
	if err != nil || !fi.IsDir() {
		return nil
	}
	hint := fmt.Sprintf("%s is a directory; pass the bundle file, e.g. %s", safe(name), safe(filepath.Join(name, broadcast.BundleName)))
	if alt != "" {
		hint += ", or " + alt
	}
	return cli.Exit(fmt.Sprintf("%s: not a valid bundle: a directory\nkbundle: hint: %s", safe(name), hint), exitUnusable)
}

// fileAsDir is the error of a file passed as --dir, the cache directory,
// with the hint to pass it as the bundle; nil when dir is not a file.
func fileAsDir(dir, cmd string) error {
	fi, err := os.Stat(dir)
	if err != nil || fi.IsDir() {
		return nil
	}
	return cli.Exit(fmt.Sprintf("--dir %s: not a directory: --dir names the cache directory that holds %s\nkbundle: hint: pass the bundle file itself: kbundle %s %s",
		safe(dir), broadcast.BundleName, cmd, safe(dir)), exitUnusable)
}
