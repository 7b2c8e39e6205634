package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
)

// TestExitFor: one classification; a destination problem is never exit 3
// nor told to repack or create the bundle (M6 of the UX review).
func TestExitFor(t *testing.T) {
	missing := &fs.PathError{Op: "open", Path: "b.kbundle", Err: fs.ErrNotExist}
	mkdir := &fs.PathError{Op: "mkdir", Path: "/proc/nope", Err: fs.ErrNotExist}
	denied := &fs.PathError{Op: "mkdir", Path: "/ro/x", Err: fs.ErrPermission}
	for _, tc := range []struct {
		name string
		err  error
		code int
		hint string // substring; "" means no hint
	}{
		{"bundle missing", &bundleError{missing}, exitUnusable, "create it"},
		{"bundle unreadable", &bundleError{&fs.PathError{Op: "open", Path: "b", Err: fs.ErrPermission}}, exitError, "cannot read the bundle"},
		{"bundle damaged", &bundleError{fmt.Errorf("x: %w", bundle.ErrChecksum)}, exitUnusable, "pack it again"},
		{"untrusted", fmt.Errorf("x: %w", bundle.ErrUntrusted), exitUnusable, "KBUNDLE_TRUSTED_GROUPS"},
		{"newer version", bundle.ErrVersion, exitUnusable, "upgrade"},
		{"hostile", bundle.ErrInsecurePath, exitUnusable, "do not use it"},
		{"extract: dest parent missing", atDest(mkdir), exitError, "destination, not the bundle"},
		{"extract: dest exists", atDest(bundle.ErrExist), exitError, "another destination"},
		{"extract: dest not writable", atDest(denied), exitError, "not writable by you"},
		{"extract: damaged stays 3", atDest(bundle.ErrChecksum), exitUnusable, "pack it again"},
		{"load: rank 0 has no bundle", fmt.Errorf("%w: %w", broadcast.ErrNoBundle, missing), exitUnusable, "create it"},
		{"load: rank 0's bundle damaged", fmt.Errorf("%w: %w", broadcast.ErrNoBundle, bundle.ErrFormat), exitUnusable, "pack it again"},
		{"load: dest parent missing", fmt.Errorf("vm (rank 0): cannot create: %w", mkdir), exitError, "--to"},
		{"load: dest not writable", fmt.Errorf("vm: %w", denied), exitError, "--to"},
		{"interrupted by a signal", interrupted{syscall.SIGTERM}, exitError, ""},
		{"load: a node interrupted", atDest(fmt.Errorf("kbn2 (ranks 2-3): %w", interrupted{syscall.SIGTERM})), exitError, ""},
		{"other", errors.New("boom"), exitError, ""},
	} {
		code, hint := exitFor(tc.err)
		if code != tc.code || (tc.hint == "") != (hint == "") || !strings.Contains(hint, tc.hint) {
			t.Errorf("%s: exitFor = %d %q, want %d and a hint with %q", tc.name, code, hint, tc.code, tc.hint)
		}
		if code != exitUnusable && (strings.Contains(hint, "pack it again") || strings.Contains(hint, "create it")) {
			t.Errorf("%s: hint %q blames the bundle", tc.name, hint)
		}
	}
}

func TestHideTemps(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"open", "cannot write the bundle: open /tmp/x/.x.kbundle.kbundle-tmp-vm-26025-2861013145: no such file or directory",
			"cannot write the bundle: cannot create a temporary in /tmp/x: no such file or directory"},
		{"mkdir", "cannot extract into /w/ro: mkdir /w/ro/.kbundle-tmp-vm-3007-2454492949: permission denied",
			"cannot extract into /w/ro: cannot create a temporary in /w/ro: permission denied"},
		{"rename", "rename .d.kbundle-tmp-h-1-2 d: busy", "a temporary in . d: busy"},
		{"none", "open /tmp/x: no such file", "open /tmp/x: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := hideTemps(tc.in); got != tc.want {
				t.Errorf("hideTemps(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
