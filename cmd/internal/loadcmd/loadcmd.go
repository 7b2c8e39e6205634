// Package loadcmd is the one front door of a load, for its two front
// ends: `kbundle load` (cmd/kbundle) and the Python binding's
// kbundle_load (cmd/libkbundle). It holds
//
//   - the request and the settings (request.go): one table, Settings, of
//     what a user can set, each resolved once (the value given, else its
//     KBUNDLE_ variable, else the default) and checked once;
//   - the guard (guard.go): the timeout, armed by both before their first
//     collective;
//   - the outcome (outcome.go): one JSON shape, one set of warning texts,
//     one classification of failures (KindOf) into exit codes and
//     Python's exceptions, and the hints;
//   - the load itself between them (run.go), and what both share besides
//     (loadcmd.go: the job id, the default destination, failure lines);
//   - the harvest's front door beside the load's (harvest.go): its
//     request resolved through the same settings, its outcome, and the
//     report lines `kbundle harvest` prints and the binding's harvest()
//     returns.
//
// The front ends keep only what is theirs: flags or JSON in, MPI set-up,
// text or JSON out. It never exits, prints, or initialises MPI. The
// environment is passed in as a lookup function (os.Getenv, or the copy
// of the caller's environment the Python binding receives).
package loadcmd

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
)

// JobIDVars are the scheduler and launcher variables holding a job id,
// first found first used.
var JobIDVars = []string{"SLURM_JOB_ID", "FLUX_JOB_ID", "PBS_JOBID", "PALS_APID", "LSB_JOBID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}

// agreeStart is what every rank of world agrees on before a load or a
// harvest, in one all-reduce (issue 31): the job id, for the default
// destination and the install record (the scheduler's or launcher's,
// JobIDVars, else "pid" and rank 0's process id, which rides on the
// all-reduce); whether every rank is alone on its node
// (broadcast.Placement, which the load's or harvest's split of the nodes
// would ask in a collective of its own); and, for Python, whether some
// rank's request failed: local, or plan's error (a usage error). plan
// makes the front's plan for a job id and placement; its error depends
// on neither, so it is known before them. For Python it returns the
// agreed error (a *broadcast.Error or nil, the same on every rank), for
// the CLI local or plan's error; err is the communicator's failure.
func agreeStart(world broadcast.NodeComm, f Front, getenv func(string) string, local error,
	plan func(job string, p broadcast.Placement) error) (agreed, err error) {
	// Both under max: rank 0's pid, and 1 where some rank is not alone.
	vals := []int64{0, 1 - broadcast.Alone(world)}
	if world.Rank() == 0 {
		vals[0] = int64(getpid())
	}
	agreedPlan := func() error {
		job := "pid" + strconv.FormatInt(vals[0], 10)
		for _, k := range JobIDVars {
			if v := getenv(k); v != "" {
				job = v
				break
			}
		}
		placed := broadcast.AllAlone
		if vals[1] == 1 {
			placed = broadcast.NotAllAlone
		}
		return plan(job, placed)
	}
	if err := plan("", broadcast.PlacementUnknown); err != nil && local == nil {
		local = &usageError{err}
	}
	shared := local // what the ranks agree on: Python's; the CLI's fail alone
	if f != Python {
		shared = nil
	}
	fail, err := broadcast.AgreeWith(world, shared, load.MaxNamed, vals, mpi.Max)
	if err != nil {
		return nil, err
	}
	// Where some rank failed, vals are unspecified (AgreeWith) and so is
	// this plan; the caller ends with the failure.
	agreedPlan() // as plan's first: its error is known already
	switch {
	case f != Python:
		return local, nil
	case fail != nil:
		return fail, nil
	}
	return nil, nil
}

// getpid is os.Getpid; a test gives each of its ranks, goroutines of one
// process, its own.
var getpid = os.Getpid

// Dest returns dest, absolute, or when dest is "" the default node-local
// directory of the job: load.Dest under $TMPDIR, named for the user and
// job. (Not $PALS_SPOOL_DIR or $FLUX_JOB_TMPDIR: the launcher removes
// them when the load's own launch ends, before the application starts.)
func Dest(dest string, getenv func(string) string, job string) (string, error) {
	if dest != "" {
		return filepath.Abs(dest)
	}
	return load.Dest(getenv("TMPDIR"), UserName(), job), nil
}

// UserName is the name of the user running the process, else its uid.
func UserName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// Trust returns the trust policy of $KBUNDLE_TRUSTED_GROUPS and
// $KBUNDLE_TRUSTED_OWNERS (bundle.ParseTrust). Its error, matching
// bundle.ErrTrustPolicy, is a usage error: never "bundle unusable", which
// a job script reads as "run cold".
func Trust(getenv func(string) string) (*bundle.TrustPolicy, error) {
	return bundle.ParseTrust(getenv("KBUNDLE_TRUSTED_GROUPS"), getenv("KBUNDLE_TRUSTED_OWNERS"))
}

// Reasons returns the lines of a failed load's message: one a failing
// node (host, ranks, reason), and how many more ranks failed when not
// all are named; else err's text.
func Reasons(err error) []string {
	var e *broadcast.Error
	lines := []string{err.Error()}
	if errors.As(err, &e) && len(e.Reasons) > 0 {
		lines = e.Reasons
		if more := e.Ranks - len(e.Reasons); more > 0 && len(e.Reasons) >= load.MaxNamed {
			lines = append(lines, fmt.Sprintf("... and %d more failing ranks", more))
		}
	}
	return lines
}

// BundleHint tells how to fix a bundle that cannot be used (untrusted,
// damaged, of a newer version, hostile), in the same words from every
// front end; "" for any other error.
func BundleHint(err error) string {
	switch {
	case errors.Is(err, bundle.ErrUntrusted):
		return "hint: kernels are code: kbundle loads only a bundle that no one but you, root and the owners and groups you trust " +
			"(KBUNDLE_TRUSTED_OWNERS, KBUNDLE_TRUSTED_GROUPS) could have written; see docs/troubleshooting.md"
	case errors.Is(err, bundle.ErrChecksum), errors.Is(err, bundle.ErrFormat), errors.Is(err, bundle.ErrTooLarge):
		return "hint: the bundle is damaged or truncated; pack it again from the cache directory"
	case errors.Is(err, bundle.ErrVersion):
		return "hint: this bundle was written by a newer kbundle; upgrade kbundle or repack"
	case errors.Is(err, bundle.ErrInsecurePath):
		return "hint: the bundle holds a path that could escape its destination; do not use it"
	}
	return ""
}

// MissingHint is the hint for a bundle that does not exist.
const MissingHint = "hint: create it with `kbundle warm --pack` or `kbundle pack`"

// ParseTimeout reads a timeout as a user types it, on the command line or
// in KBUNDLE_TIMEOUT: a bare number is seconds (as sbcast's -t and
// Python's timeout= are), anything else a Go duration such as 30s, 10m or
// 1h30m; 0 means none. A negative or unreadable value is an error that
// says what to write.
func ParseTimeout(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || f > float64(math.MaxInt64/int64(time.Second)) || f != f {
			return 0, fmt.Errorf("timeout %q: want seconds, 0 (none) or more", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("timeout %q: want a number of seconds or a duration such as 30s or 10m", s)
	}
	return d, nil
}
