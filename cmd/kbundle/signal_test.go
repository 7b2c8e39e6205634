package main

import (
	"errors"
	"syscall"
	"testing"
)

// TestExitStatusSignal: a signal is 128+N with "interrupted by ...;
// stopped", except on a collective command's silent ranks (quiet), where
// rank 0 says it for every rank (issue 25, U46); a command that finished
// despite the signal succeeded.
func TestExitStatusSignal(t *testing.T) {
	failed := errors.New("cancelled")
	for _, c := range []struct {
		name     string
		err      error
		n        int
		quiet    bool
		wantCode int
		wantMsg  string
	}{
		{"speaker", failed, int(syscall.SIGTERM), false, 143, "interrupted by SIGTERM; stopped"},
		{"silent rank", failed, int(syscall.SIGINT), true, 130, ""},
		{"finished anyway", nil, int(syscall.SIGTERM), true, 0, ""},
		{"no signal, silent rank", failed, 0, true, exitError, "cancelled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, msg := exitStatus(c.err, c.n, c.quiet)
			if code != c.wantCode || msg != c.wantMsg {
				t.Errorf("exitStatus = %d, %q; want %d, %q", code, msg, c.wantCode, c.wantMsg)
			}
		})
	}
}
