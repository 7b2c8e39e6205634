package main

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
)

// V3 of the 2026-12-01 security review: every knob of kbundle_load is
// read from the request's environ (the caller's os.environ at call time),
// KBUNDLE_TRUSTED_GROUPS/OWNERS included; before, bundle.policy() read
// those two once from the process environment.
func TestSecTrustPolicyIgnoresRequestEnviron(t *testing.T) {
	_, file := testBundle(t)
	g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		t.Skip(err)
	}
	os.Chmod(filepath.Dir(file), 0o775) // writable by the caller's own group
	res := runAll(t, []int{0}, func(int) loadcmd.Request {
		return loadcmd.Request{Bundle: file, Dest: filepath.Join(t.TempDir(), "d"),
			Environ: map[string]string{"KBUNDLE_TRUSTED_GROUPS": g.Name}}
	})
	if !res[0].OK {
		t.Errorf("KBUNDLE_TRUSTED_GROUPS=%s in the request is ignored: %s: %s", g.Name, res[0].Kind, res[0].Reason)
	}
	// And the process environment is not read: the group trusted there
	// but not in the request is not trusted.
	t.Setenv("KBUNDLE_TRUSTED_GROUPS", g.Name)
	res = runAll(t, []int{0}, func(int) loadcmd.Request {
		return loadcmd.Request{Bundle: file, Dest: filepath.Join(t.TempDir(), "d")}
	})
	if res[0].OK || res[0].Kind != loadcmd.Unusable {
		t.Errorf("KBUNDLE_TRUSTED_GROUPS=%s only in the process environment: %+v, want the bundle refused", g.Name, res[0])
	}
}
