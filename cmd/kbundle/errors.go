package main

import (
	"errors"
	"io/fs"

	"github.com/kbundle/kbundle/bundle"
	"github.com/urfave/cli/v2"
)

// unusable reports whether err means the bundle itself cannot be used:
// missing, damaged, of an unknown version, hostile or untrusted (exit 3).
func unusable(err error) bool {
	for _, s := range []error{fs.ErrNotExist, bundle.ErrFormat, bundle.ErrVersion, bundle.ErrChecksum,
		bundle.ErrInsecurePath, bundle.ErrTooLarge, bundle.ErrUntrusted} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// hint returns a line that tells the user how to fix err, or "".
func hint(err error) string {
	switch {
	case errors.Is(err, bundle.ErrUntrusted):
		return "hint: keep bundles in a directory only you can write (chmod go-w), owned by you"
	case errors.Is(err, bundle.ErrChecksum), errors.Is(err, bundle.ErrFormat), errors.Is(err, bundle.ErrTooLarge):
		return "hint: the bundle is damaged or truncated; pack it again from the cache directory"
	case errors.Is(err, bundle.ErrVersion):
		return "hint: this bundle was written by a newer kbundle; upgrade kbundle or repack"
	case errors.Is(err, bundle.ErrInsecurePath):
		return "hint: the bundle holds a path that could escape its destination; do not use it"
	case errors.Is(err, bundle.ErrExist):
		return "hint: pass --force to replace the destination: it deletes everything in it, and only a tree kbundle installed (one holding " + bundle.InstalledMarker + ") is replaced; or choose another destination"
	case errors.Is(err, fs.ErrNotExist):
		return "hint: create it with `kbundle warm --pack` or `kbundle pack`"
	}
	return ""
}

// bundleExit turns an error from reading a bundle into a cli exit error:
// exit 3 when the bundle is unusable, 1 otherwise, with a hint line.
func bundleExit(err error) error {
	if err == nil {
		return nil
	}
	code := exitError
	if unusable(err) {
		code = exitUnusable
	}
	msg := err.Error()
	if h := hint(err); h != "" {
		msg += "\nkbundle: " + h
	}
	return cli.Exit(msg, code)
}
