package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

// openArg opens the bundle named by the command's only argument, with a
// usage error when there is not exactly one.
func openArg(c *cli.Context) (*bundle.ReadCloser, string, error) {
	if c.NArg() > 1 {
		return nil, "", cli.Exit("usage: "+c.Command.UsageText, exitUsage)
	}
	names, err := bundleArgs(c, c.Args().Slice())
	if err != nil {
		return nil, "", err
	}
	trust, err := trustPolicy()
	if err != nil {
		return nil, "", err
	}
	rc, err := openBundle(c, names[0], &bundle.OpenOptions{Trust: trust})
	return rc, names[0], err
}

// fileMagic is how every bundle starts (docs/FORMAT.md, "Header").
const fileMagic = "\x89KBNDL\r\n"

// startsWithMagic reports whether the file name starts with fileMagic, or
// is not a regular file or cannot be read to tell (then the reader's own
// error stands).
func startsWithMagic(name string) bool {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a FIFO must not block
	if err != nil {
		return true
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return true
	}
	b := make([]byte, len(fileMagic))
	if _, err := io.ReadFull(f, b); err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return true
	}
	return string(b) == fileMagic
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
	if errors.Is(err, bundle.ErrFormat) && !startsWithMagic(name) {
		return nil, cli.Exit(fmt.Sprintf("%s: not a kbundle file\nkbundle: hint: pass a bundle written by kbundle pack or kbundle warm --pack", safe(name)), exitUnusable)
	}
	err = &bundleError{err}
	if fi, serr := os.Stat(name); serr == nil && fi.IsDir() {
		code, _ := exitFor(err)
		return nil, cli.Exit(fmt.Sprintf("%v\nkbundle: hint: %s is a directory; pass the bundle file, e.g. %s",
			err, safe(name), safe(filepath.Join(name, "cache.kbundle"))), code)
	}
	return nil, exit(err)
}
