package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrustSettingsUsage is U10 of the 2026-12-01 usability review: a
// malformed KBUNDLE_TRUSTED_GROUPS or KBUNDLE_TRUSTED_OWNERS is a usage
// error (exit 2) for every command that checks trust, never "bundle
// unusable" (exit 3), which kbundle-job.sbatch reads as "run cold". The
// error comes before the bundle is even looked at.
func TestTrustSettingsUsage(t *testing.T) {
	dir := t.TempDir()
	b := filepath.Join(dir, "nope.kbundle") // a missing bundle would be exit 3
	for _, env := range []struct{ k, v, want string }{
		{"KBUNDLE_TRUSTED_GROUPS", "nosuchgrp-kbundle", `KBUNDLE_TRUSTED_GROUPS: "nosuchgrp-kbundle" is not a known name or a number`},
		{"KBUNDLE_TRUSTED_OWNERS", "root nosuchuser-kbundle", `KBUNDLE_TRUSTED_OWNERS: "nosuchuser-kbundle" is not a known name or a number`},
	} {
		for _, args := range [][]string{
			{"load", "--bundle", b, "--to", filepath.Join(dir, "d")},
			{"extract", b, filepath.Join(dir, "d")},
			{"info", b},
			{"ls", b},
			{"verify", b},
			{"pack", "--dir", dir, "-o", filepath.Join(dir, "out.kbundle")},
		} {
			t.Run(env.k+"/"+args[0], func(t *testing.T) {
				t.Setenv(env.k, env.v)
				var stderr bytes.Buffer
				code := run(append([]string{"kbundle"}, args...), io.Discard, &stderr)
				if code != exitUsage || !strings.Contains(stderr.String(), env.want) {
					t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), exitUsage, env.want)
				}
			})
		}
	}
}
