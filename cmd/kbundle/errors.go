package main

import (
	"context"
	"errors"
	"io/fs"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/urfave/cli/v2"
)

// destError marks an error about the destination (DEST, its parent, the
// disk), never about the bundle: exit 1, whatever it wraps.
type destError struct{ err error }

func (e *destError) Error() string { return e.err.Error() }
func (e *destError) Unwrap() error { return e.err }

// bundleError marks an error from opening the bundle named on the command
// line: a missing file there is a missing bundle (exit 3).
type bundleError struct{ err error }

func (e *bundleError) Error() string { return e.err.Error() }
func (e *bundleError) Unwrap() error { return e.err }

// atDest marks err, unless it is about the bundle's content, as a
// destination problem. Extraction errors go through it: a missing parent
// of DEST is not a missing bundle.
func atDest(err error) error {
	if err == nil || bundle.Unusable(err) {
		return err
	}
	return &destError{err}
}

// exitFor is the one classification of errors for every command: the exit
// status and a "hint: ..." line telling the user how to fix err ("" when
// there is nothing to add). Exit 3 means the bundle is unusable (missing,
// damaged, of a newer version, hostile or untrusted); a destination
// problem is 1, never 3. A missing file or a permission problem is the
// bundle's only when it came from opening the bundle (bundleError) or from
// rank 0's reading it (broadcast.ErrNoBundle); otherwise it is the
// destination's.
func exitFor(err error) (code int, hint string) {
	var de *destError
	atBundle := errors.As(err, new(*bundleError)) || errors.Is(err, broadcast.ErrNoBundle)
	unusable := loadcmd.BundleHint(err)
	switch {
	case err == nil:
		return exitOK, ""
	case errors.Is(err, bundle.ErrNoParent):
		return exitUsage, loadcmd.Hint(loadcmd.CLI, err)
	case errors.Is(err, bundle.ErrDestination), errors.Is(err, bundle.ErrNoSpace):
		return exitError, "" // the message says why and what to do
	case errors.Is(err, context.Canceled):
		return exitError, "" // interrupted (a signal): nothing to fix
	case errors.As(err, &de):
		return exitError, loadcmd.Hint(loadcmd.CLI, err) // a load's node-local failure is one too
	case unusable != "":
		return exitUnusable, unusable
	case errors.Is(err, bundle.ErrExist):
		return exitError, loadcmd.Hint(loadcmd.CLI, err) // load's words: use --force
	case atBundle && errors.Is(err, fs.ErrNotExist):
		return exitUnusable, loadcmd.MissingHint
	case atBundle && errors.Is(err, fs.ErrPermission):
		return exitError, "hint: you cannot read the bundle; check its and its directories' permissions"
	case errors.Is(err, broadcast.ErrNoBundle):
		return exitUnusable, ""
	case errors.Is(err, fs.ErrNotExist):
		return exitError, "hint: a path kbundle needed does not exist; if it is the destination's, check --to or KBUNDLE_LOCAL_DIR"
	case errors.Is(err, fs.ErrPermission):
		return exitError, "hint: permission denied; if on the destination, choose one you can write (--to or KBUNDLE_LOCAL_DIR)"
	}
	return exitError, ""
}

// exit turns err into a cli exit error with exitFor's status and hint.
func exit(err error) error {
	if err == nil {
		return nil
	}
	code, h := exitFor(err)
	msg := err.Error()
	if h != "" {
		msg += "\nkbundle: " + h
	}
	return cli.Exit(msg, code)
}
