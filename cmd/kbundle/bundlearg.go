package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
)

// bundleArgs are the bundles a reader (info, ls, verify, extract, merge)
// is to read: the n arguments given (n: how many of the command's
// leading arguments are bundles; -1: all), or, when none is given, the
// one loadcmd.DefaultBundle names ($KBUNDLE_BUNDLE, else
// $KBUNDLE_CACHE_DIR/cache.kbundle), as load reads it. Each names a
// bundle file or a set's base; a directory gets the hint that names its
// cache.kbundle (openBundle).
func bundleArgs(c *cli.Context, given []string) ([]string, error) {
	if len(given) > 0 {
		return given, nil
	}
	if b := loadcmd.DefaultBundle(os.Getenv); b != "" {
		return []string{b}, nil
	}
	return nil, cli.Exit(loadcmd.NoBundle+" (usage: "+c.Command.UsageText+")", exitUsage)
}
