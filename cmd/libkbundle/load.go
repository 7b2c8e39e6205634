package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/warmup"
)

// request is kbundle_load's JSON argument: load_bundle's arguments, and
// the caller's environment (Go's own copy is taken when the library is
// loaded, so later changes to os.environ would be missed).
type request struct {
	Bundle string `json:"bundle"` // "": $KBUNDLE_CACHE_DIR/cache.kbundle (rank 0's)
	Dest   string `json:"dest"`   // "": $KBUNDLE_LOCAL_DIR, else load.Dest
	Force  bool   `json:"force"`  // replace a non-empty destination
	// Jobs is the number of extraction workers per node; null:
	// $KBUNDLE_JOBS, else 0 (all cores).
	Jobs *int `json:"jobs"`
	// Presets: null: $KBUNDLE_PRESET, else the bundle's recorded presets;
	// []: none.
	Presets *[]string `json:"presets"`
	// Timeout in seconds; null: $KBUNDLE_TIMEOUT (loadcmd.ParseTimeout), else
	// 10 minutes; 0: none.
	Timeout *float64          `json:"timeout"`
	Environ map[string]string `json:"environ"`
}

// Result kinds: what the caller does with a failure.
const (
	// kindUnusable: the bundle cannot be used (missing, damaged,
	// untrusted, none configured); the same on every rank.
	kindUnusable = "unusable"
	// kindFailed: the load failed on some node (destination exists or is
	// unwritable, disk full); nothing was installed on any node; the same
	// on every rank.
	kindFailed = "failed"
	// kindUsage: a bad argument or KBUNDLE_ variable; the same on every
	// rank.
	kindUsage = "usage"
	// kindMPI: MPI or the communicator cannot be used here (MPI not
	// initialised or with too low a thread level, a communication
	// failure); local to this rank.
	kindMPI = "mpi"
)

// result is kbundle_load's JSON answer. On success OK is true and the
// summary is filled (as `kbundle load --json`); otherwise Kind, Reason
// (lines, without the "kbundle: " prefix) and Hint say why.
type result struct {
	OK            bool     `json:"ok"`
	Kind          string   `json:"kind,omitempty"`
	Reason        string   `json:"reason,omitempty"`
	Hint          string   `json:"hint,omitempty"`
	Dest          string   `json:"dest,omitempty"`
	Bundle        string   `json:"bundle,omitempty"`
	Entries       int      `json:"entries"`
	Bytes         int64    `json:"bytes"`
	RawBytes      int64    `json:"raw_bytes"`
	Nodes         int      `json:"nodes"`
	Ranks         int      `json:"ranks"`
	Leader        bool     `json:"leader"`
	ReadSeconds   float64  `json:"read_seconds"`
	BcastSeconds  float64  `json:"bcast_seconds"`
	ExtractSecs   float64  `json:"extract_seconds"`
	TotalSeconds  float64  `json:"total_seconds"`
	MismatchNodes int      `json:"mismatch_nodes"`
	MismatchKeys  []string `json:"mismatch_keys"`
	Presets       []string `json:"presets"`
	EmptyPresets  []string `json:"empty_presets"` // leaders: named presets the bundle has nothing for
	Env           []string `json:"env"`
	HeldBytes     int64    `json:"held_bytes"`
	Taken         string   `json:"taken,omitempty"` // the default DEST, held by another user on TakenNodes nodes
	TakenNodes    int      `json:"taken_nodes,omitempty"`
}

// loadFortran is kbundle_load: it adopts the program's MPI, duplicates
// the communicator whose Fortran handle is comm, and loads over it.
func loadFortran(ctx context.Context, comm int64, req []byte) []byte {
	var r request
	if err := json.Unmarshal(req, &r); err != nil {
		return encode(result{Kind: kindUsage, Reason: "bad request: " + err.Error()})
	}
	if err := mpi.Adopt(); err != nil {
		res := result{Kind: kindMPI, Reason: err.Error()}
		switch {
		case errors.Is(err, mpi.ErrThreadLevel):
			res.Hint = "hint: leave mpi4py.rc.thread_level at its default (\"multiple\") or set it to \"serialized\" before importing mpi4py.MPI"
		case errors.Is(err, mpi.ErrABI):
			res.Hint = "hint: use the libkbundle built with this MPI's mpicc (the Python package picks it from mpi4py's MPI unless KBUNDLE_LIBRARY says otherwise)"
		case errors.Is(err, mpi.ErrNotInitialized):
			res.Hint = "hint: import mpi4py.MPI (which initialises MPI) before calling load_bundle"
		}
		return encode(res)
	}
	// The timeout bounds the whole call, from the communicator's
	// duplication on (a rank that never calls load_bundle blocks the
	// others there already), so it is armed here rather than by load.Run.
	if d := guardTimeout(r); d > 0 {
		host, _ := os.Hostname()
		rank := mpi.World().Rank()
		t := time.AfterFunc(d, func() {
			bundle.RemoveTemps()
			abortJob(fmt.Sprintf("rank %d (%s): load_bundle did not finish within %s (a node or link may be down, or a rank did not call it); aborting the job",
				rank, host, d))
		})
		defer t.Stop()
	}
	c, err := mpi.FromFortran(comm)
	if err != nil {
		return encode(result{Kind: kindMPI, Reason: err.Error()})
	}
	defer c.Free()
	return encode(run(ctx, broadcast.FromMPI(c), r, nil))
}

// guardTimeout is the request's timeout as resolve reads it; an invalid
// one (reported by resolve, agreed over the ranks) gives the default.
func guardTimeout(r request) time.Duration {
	d, err := timeout(r, func(k string) string { return r.Environ[k] })
	if err != nil {
		return loadcmd.DefaultTimeout
	}
	return d
}

// timeout returns the request's timeout: its own, else $KBUNDLE_TIMEOUT,
// else loadcmd.DefaultTimeout; 0 means none.
func timeout(r request, getenv func(string) string) (time.Duration, error) {
	switch v := getenv("KBUNDLE_TIMEOUT"); {
	case r.Timeout != nil:
		if *r.Timeout < 0 || *r.Timeout > (1<<62)/float64(time.Second) {
			return 0, fmt.Errorf("timeout=%v: want seconds, 0 (none) or more", *r.Timeout)
		}
		return time.Duration(*r.Timeout * float64(time.Second)), nil
	case v != "":
		d, err := loadcmd.ParseTimeout(v)
		if err != nil {
			return 0, fmt.Errorf("KBUNDLE_TIMEOUT: %w", err)
		}
		return d, nil
	}
	return loadcmd.DefaultTimeout, nil
}

func encode(r result) []byte {
	b, err := json.Marshal(r)
	if err != nil { // only plain fields: cannot happen
		return []byte(`{"ok":false,"kind":"mpi","reason":"cannot encode the result"}`)
	}
	return b
}

// run loads over world as `kbundle load` does; collective. Every rank
// returns the same result, except the local failures of kind kindMPI.
// onTimeout is load.Plan.OnTimeout; nil: no timeout here (the caller
// has one around the whole call).
func run(ctx context.Context, world broadcast.NodeComm, r request, onTimeout func(string)) result {
	getenv := func(k string) string { return r.Environ[k] }
	// A job id the same on every rank, for the default destination.
	job, err := loadcmd.JobID(world, getenv)
	if err != nil {
		return result{Kind: kindMPI, Reason: err.Error()}
	}
	p, local := resolve(r, getenv, job, world.Rank())
	// Every rank learns every rank's argument problem: the same result
	// everywhere, and nobody enters the load alone.
	agreed, err := broadcast.Agree(world, local, load.MaxNamed)
	if err != nil {
		return result{Kind: kindMPI, Reason: err.Error()}
	}
	if agreed != nil {
		kind := kindUsage
		if errors.Is(agreed, broadcast.ErrNoBundle) {
			kind = kindUnusable
		}
		return failure(kind, agreed)
	}
	if onTimeout == nil {
		p.Timeout = 0 // the caller bounds the call itself
	}
	p.OnTimeout = onTimeout
	sum, err := load.Run(ctx, world, p)
	switch {
	case err == nil:
	case errors.Is(err, broadcast.ErrComm):
		return result{Kind: kindMPI, Reason: err.Error()}
	case errors.Is(err, broadcast.ErrNoBundle):
		return failure(kindUnusable, err)
	default:
		return failure(kindFailed, err)
	}
	return result{
		OK: true, Dest: sum.Dest, Bundle: p.Bundle, Entries: sum.Entries, Bytes: sum.Bytes,
		RawBytes: sum.RawBytes, Nodes: sum.Nodes, Ranks: sum.Ranks, Leader: sum.Leader,
		ReadSeconds: sum.Read.Seconds(), BcastSeconds: sum.Bcast.Seconds(),
		ExtractSecs: sum.Extract.Seconds(), TotalSeconds: sum.Total.Seconds(),
		MismatchNodes: sum.MismatchNodes, MismatchKeys: orEmpty(sum.MismatchKeys),
		Presets: orEmpty(sum.Presets), EmptyPresets: orEmpty(sum.EmptyPresets), Env: orEmpty(sum.Env),
		HeldBytes: sum.Held, Taken: sum.Taken, TakenNodes: sum.TakenNodes,
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// resolve fills the plan from the request and the environment, as
// `kbundle load` reads its flags and KBUNDLE_ variables. The error is
// this rank's; one about the bundle matches broadcast.ErrNoBundle.
func resolve(r request, getenv func(string) string, job string, rank int) (load.Plan, error) {
	p, knobs := loadcmd.Plan(getenv)
	p.Bundle, p.Force = r.Bundle, r.Force
	switch v := getenv("KBUNDLE_JOBS"); {
	case r.Jobs != nil:
		if *r.Jobs < 0 {
			return p, fmt.Errorf("jobs=%d: want 0 (all cores) or more", *r.Jobs)
		}
		p.Jobs = *r.Jobs
	case v != "":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return p, fmt.Errorf("KBUNDLE_JOBS=%q: want a whole number of workers, 0 (all cores) or more", v)
		}
		p.Jobs = n
	}
	names := r.Presets
	if names == nil {
		if v := getenv("KBUNDLE_PRESET"); v != "" {
			names = &[]string{v}
		}
	}
	if names != nil {
		ps, err := warmup.ParseList(*names...)
		if err != nil {
			return p, err
		}
		p.Presets = ps
		if p.Presets == nil {
			p.Presets = []*warmup.Preset{} // none, and not the recorded ones
		}
	} else {
		p.UseRecorded = true
	}
	d, err := timeout(r, getenv)
	if err != nil {
		return p, err
	}
	p.Timeout = d
	if knobs != nil {
		return p, knobs
	}
	dest := r.Dest
	if dest == "" {
		dest = getenv("KBUNDLE_LOCAL_DIR")
	}
	p.GuessableDest = dest == "" // the default name: moved if another user holds it
	dest, err = loadcmd.Dest(dest, getenv, job)
	if err != nil {
		return p, err
	}
	p.Dest = dest
	if p.Bundle == "" {
		if dir := getenv(broadcast.CacheDirEnv); dir != "" {
			p.Bundle = filepath.Join(dir, broadcast.BundleName)
		} else if rank == 0 { // only rank 0's bundle is read
			return p, fmt.Errorf("%w: no bundle given: pass bundle=FILE or set %s", broadcast.ErrNoBundle, broadcast.CacheDirEnv)
		}
	}
	return p, nil
}

// failure is an agreed failure as `kbundle load` prints it: one line a
// failing node (host, ranks, reason), then what it means; the hint apart.
func failure(kind string, err error) result {
	lines := loadcmd.Reasons(err)
	if kind == kindFailed {
		lines = append(lines, "nothing was installed on any node")
	}
	return result{Kind: kind, Reason: strings.Join(lines, "\n"), Hint: hint(err)}
}

// hint tells how to fix err, in the Python API's terms, or "".
func hint(err error) string {
	switch h := loadcmd.BundleHint(err); {
	case h != "":
		return h
	case errors.Is(err, bundle.ErrExist):
		return "hint: pass force=True to replace the destination"
	case errors.Is(err, fs.ErrNotExist):
		return loadcmd.MissingHint
	}
	return ""
}
