package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

// openArg opens the bundle named by the command's only argument, with a
// usage error when there is not exactly one.
func openArg(c *cli.Context) (*bundle.ReadCloser, error) {
	a, err := args(c, "FILE")
	if err != nil {
		return nil, err
	}
	trust, err := trustPolicy()
	if err != nil {
		return nil, err
	}
	return openBundle(c, a[0], &bundle.OpenOptions{Trust: trust})
}

// openBundle opens the bundle file name, warning on c's stderr when load
// would refuse it; a directory gets a hint naming the bundle file it
// probably holds.
func openBundle(c *cli.Context, name string, opt *bundle.OpenOptions) (*bundle.ReadCloser, error) {
	if name == "-" {
		return nil, cli.Exit("a bundle is read from a file, not from stdin: pass the file's name (./- for a file named -)", exitUsage)
	}
	rc, err := bundle.Open(name, opt)
	if err == nil {
		if u := rc.Untrusted(); u != nil {
			warn(c, "extract and load will refuse this bundle: %s", safe(u.Error()))
		}
		return rc, nil
	}
	err = &bundleError{err}
	if fi, serr := os.Stat(name); serr == nil && fi.IsDir() {
		code, _ := exitFor(err)
		return nil, cli.Exit(fmt.Sprintf("%v\nkbundle: hint: %s is a directory; pass the bundle file, e.g. %s",
			err, safe(name), safe(filepath.Join(name, "cache.kbundle"))), code)
	}
	return nil, exit(err)
}
