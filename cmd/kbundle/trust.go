package main

import (
	"os"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/urfave/cli/v2"
)

// trustHint says how the trust variables are written (load's too).
const trustHint = loadcmd.TrustHint

// trustPolicy returns the trust policy of $KBUNDLE_TRUSTED_GROUPS and
// $KBUNDLE_TRUSTED_OWNERS. A malformed one is a usage error (exit 2),
// never "bundle unusable" (3), which the job scripts read as "run cold".
func trustPolicy() (*bundle.TrustPolicy, error) {
	p, err := loadcmd.Trust(os.Getenv)
	if err != nil {
		return nil, cli.Exit(err.Error()+"\nkbundle: "+trustHint, exitUsage)
	}
	return p, nil
}
