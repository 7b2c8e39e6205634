package loadcmd

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/hostinfo"
	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
	"golang.org/x/sys/unix"
)

// Front is a front end of the load: it decides how a setting is spelt in
// a message (--jobs, jobs=).
type Front int

const (
	CLI    Front = iota // `kbundle load` (cmd/kbundle)
	Python              // load_bundle (cmd/libkbundle, python/kbundle)
)

// name is what f calls a load in its messages.
func (f Front) name() string { return [...]string{"load", "load_bundle"}[f] }

// given is how f spells a value v given for s: "--jobs 5", "jobs=5".
func (f Front) given(s string, v any) string {
	if f == Python {
		return fmt.Sprintf("%s=%v", setting(s).Keyword, v)
	}
	return fmt.Sprintf("--%s %v", s, v)
}

// spell is how f starts a value given for s: "--bundle ", "bundle=".
func (f Front) spell(s string) string {
	if f == Python {
		return setting(s).Keyword + "="
	}
	return "--" + s + " "
}

// A Setting is one knob of a load, the same for both front ends: a value
// given (flag or keyword) wins, then its KBUNDLE_ variable, then the
// default. Resolve reads and checks each; the CLI's flags are made from
// this table, and tests check Python's keywords and docs/ (environment.md, commands/load.md) against
// it.
type Setting struct {
	Flag    string // `kbundle load`'s --flag; "": none
	Alias   string // the flag's one-letter alias; "": none
	Keyword string // load_bundle's keyword; "": none
	Env     string // its variable; "": none
	Usage   string // what it does: the flag's help (the back-quoted word is its placeholder)
}

// The settings, in --help's order.
var Settings = []Setting{
	{Flag: "bundle", Alias: "b", Keyword: "bundle", Env: "KBUNDLE_BUNDLE", Usage: "bundle `FILE` to load"},
	{Flag: "dir", Env: broadcast.CacheDirEnv, Usage: "the cache directory `DIR`: load DIR/" + broadcast.BundleName},
	{Flag: "to", Keyword: "dest", Env: "KBUNDLE_LOCAL_DIR", Usage: "node-local `DEST`ination directory"},
	{Flag: "force", Keyword: "force", Usage: "replace DEST if it exists and is not empty"},
	{Flag: "parents", Keyword: "parents", Usage: "create DEST's missing parent directories, and with --allow-missing the set's missing folder (without it a missing one is refused, exit 2)"},
	{Flag: "allow-missing", Keyword: "allow_missing", Env: "KBUNDLE_ALLOW_MISSING",
		Usage: "when no bundle set exists at FILE yet, install an empty DEST instead of exiting 3: the job runs cold and its harvest writes the set (1 or 0)"},
	{Flag: "preset", Alias: "p", Keyword: "preset", Env: "KBUNDLE_PRESET",
		Usage: "framework `NAME` (repeatable, or space/comma separated; see `kbundle presets`), added to the bundle's recorded presets"},
	{Flag: "replace-presets", Keyword: "replace_presets", Usage: "apply only --preset's presets, not the bundle's recorded ones (none with --preset '')"},
	{Flag: "jobs", Alias: "j", Keyword: "jobs", Env: "KBUNDLE_JOBS",
		Usage: fmt.Sprintf("use `N` extraction workers per node (0: all cores; 0..%d)", bundle.MaxJobs)},
	{Flag: "timeout", Keyword: "timeout", Env: "KBUNDLE_TIMEOUT",
		Usage: "end the load (MPI_Abort) if it has not finished by then: a node or link is down (`D`: seconds, or with a unit: 30s, 10m; 0: none)"},
	{Flag: "gpu-arch", Env: "KBUNDLE_GPU_ARCH",
		Usage: "install the entries of GPU architecture `ARCH` (9.0, sm_90, gfx90a) and leave out the others'; all: every architecture; default: each node's GPU's, all where none is seen"},
	{Flag: "per-node", Env: "KBUNDLE_PER_NODE",
		Usage: "this task loads its node alone, with no collective and no MPI: run one task a node (srun --ntasks-per-node=1, an init container, pdsh); nodes do not agree, the launcher's exit status does (1 or 0)"},
	{Flag: "python", Env: "KBUNDLE_PYTHON",
		Usage: "the job's Python `PATH`, whose package versions are compared with the warm-up's (default: python3 on PATH; load_bundle: its own interpreter)"},
	{Env: "KBUNDLE_TRUSTED_OWNERS", Usage: "users trusted to have written the bundle and DEST's parents, besides you and root"},
	{Env: "KBUNDLE_TRUSTED_GROUPS", Usage: "groups trusted likewise"},
	{Env: "KBUNDLE_BCAST_CHUNK", Usage: "the size of each broadcast, in bytes"},
	{Env: "KBUNDLE_TEST_RANKS_PER_NODE", Usage: "for tests: every N consecutive ranks form one node"},
}

// setting returns the setting of flag name.
func setting(flag string) Setting {
	for _, s := range Settings {
		if s.Flag == flag {
			return s
		}
	}
	panic("loadcmd: no setting " + flag)
}

// ErrUsage marks a bad argument or KBUNDLE_ variable (Kind Usage).
var ErrUsage = errors.New("usage")

type usageError struct{ err error }

func (e *usageError) Error() string        { return e.err.Error() }
func (e *usageError) Unwrap() []error      { return []error{e.err, ErrUsage} }
func usagef(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }

// A Request is what the user asked of a load; the zero value asks for
// every default. It is also kbundle_load's JSON argument.
type Request struct {
	Bundle string `json:"bundle"` // the bundle file; "": not given
	Dir    string `json:"-"`      // the cache directory (the CLI's --dir); "": not given
	Dest   string `json:"dest"`   // "": not given
	Force  bool   `json:"force"`  // replace a non-empty destination
	// Parents: create DEST's missing parent directories.
	Parents bool `json:"parents"`
	// AllowMissing: a missing set installs an empty DEST; nil: not given.
	AllowMissing *bool `json:"allow_missing"`
	Jobs         *int  `json:"jobs"` // extraction workers per node; nil: not given
	// Presets: nil: not given; []: none. They are added to the
	// bundle's recorded presets unless ReplacePresets.
	Presets        *[]string `json:"presets"`
	ReplacePresets bool      `json:"replace_presets"`
	// Timeout in seconds; nil: not given; 0: none.
	Timeout *float64 `json:"timeout"`
	// PerNode: this task loads its node alone (the CLI's --per-node);
	// nil: not given.
	PerNode *bool `json:"-"`
	// GPUArch is the CLI's --gpu-arch ("": not given).
	GPUArch string `json:"-"`
	// Python is the interpreter whose versions are compared ("": not
	// given): the CLI's --python, load_bundle's own sys.executable.
	Python string `json:"python"`
	// Environ is the caller's environment. Python's is always this one
	// (os.environ as the call sees it: Go copies the process's when the
	// library loads, and never reads that copy for a load); the CLI's is
	// the process's when nil.
	Environ map[string]string `json:"environ"`
}

// getenv is the request's environment lookup for front f.
func (r Request) getenv(f Front) func(string) string {
	if r.Environ == nil && f == CLI {
		return os.Getenv
	}
	return func(k string) string { return r.Environ[k] }
}

// DefaultTimeout bounds a load unless the caller or $KBUNDLE_TIMEOUT
// says otherwise.
const DefaultTimeout = 10 * time.Minute

// Options are a resolved Request: everything a load needs but its
// destination's default name, which needs the job id (agreeStart, collective).
type Options struct {
	Timeout time.Duration // 0: none
	// Progress is load.Plan.Progress (rank 0's display; nil: none).
	Progress func(done, total int64)
	plan     load.Plan // all but Dest, GuessableDest
	dest     string    // given, or $KBUNDLE_LOCAL_DIR; "": the default (load.Dest)
	python   string    // the interpreter the toolchain probe asks
	getenv   func(string) string
	perNode  bool
}

// PerNode reports whether this task loads its node alone (--per-node,
// $KBUNDLE_PER_NODE): over broadcast.Self, with no MPI.
func (o Options) PerNode() bool { return o.perNode }

// PerNodeCheck refuses a load --per-node that cannot work: where the
// launcher says this node runs more than one task (det: detect's answer),
// each would install the same DEST; and with neither DEST given nor a
// scheduler's job id (JobIDVars), each node would name its default DEST
// after its own process id, which the application's launch cannot find.
// Its error matches ErrUsage.
func (o Options) PerNodeCheck(det detect.Result, host string) error {
	if det.LocalSize > 1 {
		return PerNodeTasks(det, host)
	}
	if o.dest != "" {
		return nil
	}
	for _, k := range JobIDVars {
		if o.getenv(k) != "" {
			return nil
		}
	}
	return usagef("--per-node: no DEST given and no scheduler job id (%s) to name the default one alike on every node: "+
		"pass --to DEST (or set KBUNDLE_LOCAL_DIR), the same DEST the application is given", strings.Join(JobIDVars, ", "))
}

// PerNodeTasks is the refusal of a --per-node command on a node where
// the launcher runs more than one task (harvest's, and load's first).
func PerNodeTasks(det detect.Result, host string) error {
	return usagef("--per-node runs one task a node, but %s runs %d tasks of this launch (%s, local rank %d): "+
		"start one a node (srun --ntasks-per-node=1, mpirun --map-by ppr:1:node, torchrun --nproc-per-node 1), "+
		"or run over MPI without --per-node", Safe(host), det.LocalSize, det.Launcher, det.LocalRank)
}

// Prefetch starts the toolchain probe now, in the background, for a
// task that will likely lead its node (its launcher says local rank 0),
// so that it runs while MPI starts (hostinfo.Prefetch); stop ends it.
// A task that does not lead never waits for it.
func (o *Options) Prefetch() (stop func()) {
	pf := hostinfo.StartPrefetch(o.python, o.getenv)
	o.plan.Toolchain = pf.Toolchain
	return pf.Stop
}

// ProbeInProcess reads Python's versions with call, which runs the probe
// in the calling interpreter (hostinfo.InProcess): the Python front end's
// load starts no child for them. Only where the interpreter compared is
// the caller's own (load_bundle's default).
func (o *Options) ProbeInProcess(call func(script string, want []byte) ([]byte, error)) {
	o.plan.Toolchain = hostinfo.InProcess(call, o.python, o.getenv)
}

// Presets are the presets asked for (none: the bundle's recorded ones).
func (o Options) Presets() []*preset.Preset { return o.plan.Presets }

// Resolve reads r as front f reads it, on rank rank: each setting from the
// Settings table (the value given, else its variable, else the default),
// each checked once. It makes no collective call, so a front end can arm
// its Guard with Options.Timeout before its first one. An error is this
// rank's; it matches ErrUsage, or broadcast.ErrNoBundle when Python's
// rank 0 has no bundle to read. Timeout is set whatever the error.
func Resolve(r Request, f Front, rank int) (o Options, err error) {
	o.getenv = r.getenv(f)
	if o.Timeout, err = resolveTimeout(r, f, o.getenv); err != nil {
		o.Timeout = DefaultTimeout
		return o, err
	}
	if o.plan, err = knobs(o.getenv); err != nil {
		return o, &usageError{err}
	}
	p := &o.plan
	p.Force, p.Parents = r.Force, r.Parents
	if p.AllowMissing, err = resolveBool(r.AllowMissing, "allow-missing", f, o.getenv); err != nil {
		return o, err
	}
	if f == CLI { // load_bundle loads over its communicator
		if o.perNode, err = resolveBool(r.PerNode, "per-node", f, o.getenv); err != nil {
			return o, err
		}
	}
	if p.Jobs, err = resolveJobs(r, f, o.getenv); err != nil {
		return o, err
	}
	if p.GPUArch, err = resolveGPUArch(r, f, o.getenv); err != nil {
		return o, err
	}
	python := r.Python
	if python == "" {
		python = o.getenv("KBUNDLE_PYTHON")
	}
	getenv := o.getenv
	o.python = python
	p.Toolchain = func(keys []string) (map[string]string, error) { return hostinfo.Toolchain(python, getenv, keys) }
	names := r.Presets
	if v := o.getenv("KBUNDLE_PRESET"); names == nil && v != "" {
		names = &[]string{v}
	}
	p.UseRecorded = !r.ReplacePresets
	if names != nil {
		ps, err := preset.ParseList(*names...)
		if err != nil {
			return o, &usageError{err}
		}
		p.Presets = append([]*preset.Preset{}, ps...) // added to the recorded ones unless replaced
	}
	if o.dest = r.Dest; o.dest == "" {
		o.dest = o.getenv("KBUNDLE_LOCAL_DIR")
	}
	// DEST is printed alone on stdout's first line, for scripts: a control
	// character (a newline) in it would break that.
	if f == CLI && strings.IndexFunc(o.dest, unicode.IsControl) >= 0 {
		return o, usagef("--to %s: control characters are not allowed in DEST", Safe(o.dest))
	}
	if p.Bundle, err = resolveBundle(r, f, o.getenv, rank); err != nil {
		return o, err
	}
	if o.dest != "" && p.Bundle != "" && bundle.HoldsLayers(o.dest, p.Bundle) {
		// S9's remainder: harvest would write its layers into DEST, and the
		// next load --force delete them with the tree.
		return o, usagef("%s is, or holds, the set's layer folder %s: choose a DEST outside it", o.dest, bundle.LayerDir(p.Bundle))
	}
	if p.AllowMissing && rank == 0 {
		err = setFolder(p.Bundle, r.Parents, f)
	}
	return o, err
}

// setFolder checks, for load --allow-missing, that the harvest at the
// job's end will be able to write the set at path when none exists yet
// (U34): its folder must exist (parents: made now) and be writable.
// Only rank 0 writes the set, so only rank 0 checks.
func setFolder(path string, parents bool, f Front) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	if _, err := os.Lstat(bundle.LayerDir(path)); err == nil {
		return nil // layers without a base: the load says what it finds
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && parents:
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return usagef("cannot make the set's folder %s: %v", dir, err)
		}
		return nil
	case errors.Is(err, os.ErrNotExist):
		return usagef("%s: its folder %s does not exist, so the harvest at the job's end could not write the set there: create it (mkdir -p %s), or pass %s", path, dir, dir, [...]string{"--parents", "parents=True"}[f])
	case err != nil:
		return usagef("%s: cannot read its folder: %v", path, err)
	case !fi.IsDir():
		return usagef("%s: %s is not a directory", path, dir)
	case unix.Access(dir, unix.W_OK) != nil:
		return usagef("%s: its folder %s is not writable for you, so the harvest at the job's end could not write the set there: pass a set in a folder you may write", path, dir)
	}
	return nil
}

// ResolveTimeout is the timeout of a collective command other than load
// and harvest (status): seconds given (nil: not given), else
// $KBUNDLE_TIMEOUT, else DefaultTimeout, checked and worded as for load.
func ResolveTimeout(seconds *float64, f Front, getenv func(string) string) (time.Duration, error) {
	return resolveTimeout(Request{Timeout: seconds}, f, getenv)
}

func resolveTimeout(r Request, f Front, getenv func(string) string) (time.Duration, error) {
	if s := r.Timeout; s != nil {
		if *s < 0 || *s > float64(math.MaxInt64/int64(time.Second)) || *s != *s {
			return 0, usagef("%s: want seconds, 0 (none) or more", f.given("timeout", *s))
		}
		return time.Duration(*s * float64(time.Second)), nil
	}
	if v := getenv("KBUNDLE_TIMEOUT"); v != "" {
		d, err := ParseTimeout(v)
		if err != nil {
			return 0, usagef("KBUNDLE_TIMEOUT: %w", err)
		}
		return d, nil
	}
	return DefaultTimeout, nil
}

// resolveBool is a yes/no setting: the value given, else its variable (1
// or 0, also true or false), else false.
func resolveBool(given *bool, flag string, f Front, getenv func(string) string) (bool, error) {
	if given != nil {
		return *given, nil
	}
	env := setting(flag).Env
	switch v := strings.TrimSpace(getenv(env)); strings.ToLower(v) {
	case "", "0", "false", "no":
		return false, nil
	case "1", "true", "yes":
		return true, nil
	default:
		return false, usagef("%s=%q: want 1 or 0", env, v)
	}
}

func resolveJobs(r Request, f Front, getenv func(string) string) (int, error) {
	if n := r.Jobs; n != nil {
		if *n < 0 || *n > bundle.MaxJobs {
			return 0, usagef("%s: must be 0 (all cores) to %d", f.given("jobs", *n), bundle.MaxJobs)
		}
		return *n, nil
	}
	if v := getenv("KBUNDLE_JOBS"); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > bundle.MaxJobs {
			return 0, usagef("KBUNDLE_JOBS=%q: want a whole number of workers, 0 (all cores) to %d", v, bundle.MaxJobs)
		}
		return n, nil
	}
	return 0, nil
}

// DefaultBundle is the one rule every command that reads a bundle (or
// set) follows when none is named: $KBUNDLE_BUNDLE, else
// $KBUNDLE_CACHE_DIR/cache.kbundle; "" when neither is set.
func DefaultBundle(getenv func(string) string) string {
	if b := getenv("KBUNDLE_BUNDLE"); b != "" {
		return b
	}
	if d := getenv(broadcast.CacheDirEnv); d != "" {
		return filepath.Join(d, broadcast.BundleName)
	}
	return ""
}

// NoBundle is the usage error of a command given no bundle, with nothing
// in DefaultBundle's variables either.
const NoBundle = "no bundle: pass FILE, or set KBUNDLE_BUNDLE or " + broadcast.CacheDirEnv

// resolveGPUArch: the architecture given, else $KBUNDLE_GPU_ARCH, else
// "" (each node's GPU's).
func resolveGPUArch(r Request, f Front, getenv func(string) string) (string, error) {
	v, given := r.GPUArch, r.GPUArch != ""
	if !given {
		v = getenv("KBUNDLE_GPU_ARCH")
	}
	if strings.TrimSpace(v) == "" {
		return "", nil
	}
	a, err := preset.ParseGPUArch(v)
	switch {
	case err != nil && given:
		return "", usagef("%s: %v", f.given("gpu-arch", v), err)
	case err != nil:
		return "", usagef("KBUNDLE_GPU_ARCH=%q: %v", v, err)
	}
	return a, nil
}

// resolveBundle: a FILE given wins, then a DIR given, then
// DefaultBundle.
func resolveBundle(r Request, f Front, getenv func(string) string, rank int) (string, error) {
	switch {
	case r.Bundle != "" && r.Dir != "":
		return "", usagef("pass --bundle FILE or --dir DIR, not both")
	case r.Bundle != "":
		return r.Bundle, nil
	case r.Dir != "":
		return filepath.Join(r.Dir, broadcast.BundleName), nil
	case DefaultBundle(getenv) != "":
		return DefaultBundle(getenv), nil
	case f == CLI:
		return "", usagef("no bundle: pass --bundle FILE or --dir DIR, or set KBUNDLE_BUNDLE or %s", broadcast.CacheDirEnv)
	case rank != 0: // only rank 0's bundle is read
		return "", nil
	}
	return "", fmt.Errorf("%w: no bundle given: pass bundle=FILE or set %s (or KBUNDLE_BUNDLE)", broadcast.ErrNoBundle, broadcast.CacheDirEnv)
}

// Knobs is knobs, for the commands beside load that launch like it
// (harvest): the same knobs read the same way.
func Knobs(getenv func(string) string) (load.Plan, error) { return knobs(getenv) }

// knobs returns a plan with what both front ends fill alike: this host's
// name and description (hostinfo.Collect, called by load on leaders
// only), BorrowNodeCPUs, and the knobs $KBUNDLE_BCAST_CHUNK (ChunkSize),
// $KBUNDLE_TEST_RANKS_PER_NODE (RanksPerNode) and the trust policy
// (Trust). The plan is filled as far as it goes.
func knobs(getenv func(string) string) (load.Plan, error) {
	host, _ := os.Hostname()
	p := load.Plan{Host: host, HostInfo: hostinfo.Collect, BorrowNodeCPUs: true}
	if v := getenv("KBUNDLE_BCAST_CHUNK"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > broadcast.MaxChunkSize {
			return p, fmt.Errorf("KBUNDLE_BCAST_CHUNK=%q: want a number of bytes from 1 to %d", v, int64(broadcast.MaxChunkSize))
		}
		p.ChunkSize = n
	}
	if v := getenv("KBUNDLE_TEST_RANKS_PER_NODE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, fmt.Errorf("KBUNDLE_TEST_RANKS_PER_NODE=%q: want a whole number of ranks, 1 or more", v)
		}
		p.RanksPerNode = n
	}
	t, err := Trust(getenv)
	if err != nil {
		return p, err
	}
	p.Trust = t
	return p, nil
}

// Plan returns the load's plan once the job id is known (agreeStart): Dest
// absolute, or the job's default node-local directory. Without MPI the
// process is one node; one of several tasks loading alone (tasks: a
// launcher without MPI) keeps the default name even when another user
// holds it, since the tasks could not agree on another.
func (o Options) Plan(job string, usingMPI, tasks bool) (p load.Plan, err error) {
	p = o.plan
	p.Job = job // recorded in the install record
	p.Progress = o.Progress
	p.Dest, err = Dest(o.dest, o.getenv, job)
	p.GuessableDest = o.dest == "" && !tasks // the default name: moved if another user holds it
	if !usingMPI {
		p.RanksPerNode = 0
	}
	return p, err
}

// CheckSingleton is the refusal of an in-process call (load_bundle,
// harvest) whose MPI runs every task the launcher started as a singleton:
// the launcher's variables in environ (the request's) say more than one task,
// and MPI_COMM_WORLD has worldSize ranks (1). It names what runs and the
// fix, as the CLI's refusal does (detect.MismatchComm); nil otherwise. The
// ABI is this library's build's.
func CheckSingleton(environ map[string]string, worldSize int) error {
	lookup := lookupIn(environ)
	det, err := detect.Detect(lookup)
	if err != nil {
		return nil // unparsable launcher variables: the load says nothing about them
	}
	if e := detect.MismatchComm(lookup, det, detect.ABI(mpi.BuildFamily()), worldSize); e != nil {
		return usagef("%s", e)
	}
	return nil
}

// Own is c, which kbundle alone uses while it does (the CLI's
// MPI_COMM_WORLD, the library's duplicate of the caller's communicator),
// as a broadcast.Placed communicator that knows how many ranks the
// launcher put on this rank's node (ranksOnNode), so that a load, harvest
// or status with one rank a node makes no communicator (issue 31).
// environ is the caller's environment; nil: the process's.
func Own(c *mpi.Comm, environ map[string]string) broadcast.NodeComm {
	lookup := os.LookupEnv
	if environ != nil {
		lookup = lookupIn(environ)
	}
	return broadcast.FromOwn(c, ranksOnNode(lookup, c.Rank(), c.Size()))
}

// lookupIn is os.LookupEnv over environ.
func lookupIn(environ map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := environ[k]; return v, ok }
}

// ranksOnNode is how many ranks the launcher's variables say share this
// rank's node, where they name rank of size as MPI does; else 0 (they do
// not say, or of another communicator).
func ranksOnNode(lookup func(string) (string, bool), rank, size int) int {
	det, err := detect.Detect(lookup)
	if err != nil || det.LocalSize < 1 || det.Rank != rank || det.Size != size {
		return 0
	}
	return det.LocalSize
}
