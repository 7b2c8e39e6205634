package loadcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/hostinfo"
	"github.com/kbundle/kbundle/harvest"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
)

// The harvest's front door, beside the load's: `kbundle harvest`'s
// report lines (HarvestReport) and the Python binding's harvest()
// (kbundle_harvest in cmd/libkbundle: HarvestRequest in, HarvestOutcome
// out). A harvest has the settings of the table it shares with load
// (bundle, dir, to/dest, timeout and the knobs: the trust variables,
// KBUNDLE_TEST_RANKS_PER_NODE), resolved by the same code, and one more,
// dry-run, its own.

// A HarvestRequest is what the user asked of a harvest; the zero value
// asks for every default. It is also kbundle_harvest's JSON argument.
type HarvestRequest struct {
	// Bundle is the set; "": not given (then $KBUNDLE_BUNDLE, else
	// $KBUNDLE_CACHE_DIR's, else the set DEST was loaded from).
	Bundle  string   `json:"bundle"`
	Dir     string   `json:"-"`        // the cache directory (the CLI's --dir); "": not given
	Dest    string   `json:"dest"`     // the DEST load installed; "": not given
	Timeout *float64 `json:"timeout"`  // seconds; nil: not given; 0: none
	DryRun  bool     `json:"dry_run"`  // report what would be harvested; move and write nothing
	MaxSize int64    `json:"max_size"` // bound the set's merged view (harvest.Plan.MaxSize); 0: none
	// Python is the job's interpreter, whose package versions the layer
	// records (U41); "": $KBUNDLE_PYTHON, else python3 on PATH.
	Python  string            `json:"python"`
	Environ map[string]string `json:"environ"` // as Request.Environ
	// Failpoint is harvest.Plan.Failpoint (tests).
	Failpoint func(step string) `json:"-"`
	// PerNode: this task harvests its node alone (the CLI's --per-node,
	// else $KBUNDLE_PER_NODE); nil: not given.
	PerNode *bool `json:"-"`
}

// HarvestOptions are a resolved HarvestRequest: everything a harvest
// needs but its DEST's default name, which needs the job id (agreeStart,
// collective).
type HarvestOptions struct {
	Timeout time.Duration // 0: none
	plan    harvest.Plan  // all but Dest
	dest    string        // given, or $KBUNDLE_LOCAL_DIR; "": the default (load.Dest)
	getenv  func(string) string
	perNode bool
	// toolchain reads the toolchain's versions (hostinfo.Toolchain, or a
	// Prefetch's answer).
	toolchain func(keys []string) (map[string]string, error)
}

// PerNode reports whether this task harvests its node alone, over
// broadcast.Self, with no MPI (--per-node, $KBUNDLE_PER_NODE).
func (o HarvestOptions) PerNode() bool { return o.perNode }

// DecodeHarvest reads kbundle_harvest's JSON request.
func DecodeHarvest(b []byte) (HarvestRequest, error) {
	var r HarvestRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return r, usagef("bad request: %v", err)
	}
	return r, nil
}

// ResolveHarvest reads r as front f reads it, on rank rank, as Resolve
// reads a load's: each setting from the Settings table (the value given,
// else its variable, else the default), checked by the same code. It
// makes no collective call. An error is this rank's and matches ErrUsage;
// only rank 0 needs a set (Python: the others' is not read). Timeout is
// set whatever the error.
func ResolveHarvest(r HarvestRequest, f Front, rank int) (o HarvestOptions, err error) {
	lr := Request{Bundle: r.Bundle, Dir: r.Dir, Dest: r.Dest, Timeout: r.Timeout, Environ: r.Environ}
	o.getenv = lr.getenv(f)
	if o.Timeout, err = resolveTimeout(lr, f, o.getenv); err != nil {
		o.Timeout = DefaultTimeout
		return o, err
	}
	k, err := knobs(o.getenv)
	if err != nil {
		return o, &usageError{err}
	}
	if r.MaxSize < 0 {
		return o, usagef("%s: want a size of 0 or more", f.given("max-size", r.MaxSize))
	}
	if f == CLI { // harvest() works over its communicator
		if o.perNode, err = resolveBool(r.PerNode, "per-node", f, o.getenv); err != nil {
			return o, err
		}
	}
	o.plan = harvest.Plan{Host: k.Host, Trust: k.Trust, RanksPerNode: k.RanksPerNode, DryRun: r.DryRun, MaxSize: r.MaxSize,
		Failpoint: r.Failpoint, Getenv: o.getenv, Python: r.Python}
	if o.plan.Python == "" {
		o.plan.Python = o.getenv("KBUNDLE_PYTHON") // its sqlite3 merges whole-file databases (harvest.Plan.Python)
	}
	python := o.plan.Python
	o.toolchain = func(keys []string) (map[string]string, error) { return hostinfo.Toolchain(python, o.getenv, keys) }
	if o.dest = r.Dest; o.dest == "" {
		o.dest = o.getenv("KBUNDLE_LOCAL_DIR")
	}
	if f == CLI && strings.IndexFunc(o.dest, unicode.IsControl) >= 0 {
		return o, usagef("--to %s: control characters are not allowed in DEST", Safe(o.dest))
	}
	if lr.Bundle == "" && lr.Dir == "" && DefaultBundle(o.getenv) == "" {
		return o, nil // the set DEST was loaded from (rank 0's)
	}
	if o.plan.Bundle, err = resolveBundle(lr, f, o.getenv, rank); err != nil {
		return o, err
	}
	if fi, err := os.Stat(o.plan.Bundle); err == nil && fi.IsDir() {
		// U35: a directory would get a stray set beside it (DIR.d).
		in := filepath.Join(o.plan.Bundle, broadcast.BundleName)
		if f == Python {
			return o, usagef("%s is a directory, not a bundle set: pass bundle=%s, or the set's file", o.plan.Bundle, in)
		}
		return o, usagef("%s is a directory, not a bundle set: pass --dir %s (%s), or the set's file", o.plan.Bundle, o.plan.Bundle, in)
	}
	return o, nil
}

// Prefetch starts the toolchain probe now, in the background, for a
// task that will likely lead its node, as a load's (Options.Prefetch):
// rank 0 records the versions in the layer it writes, and a leader whose
// presets look cold reads them for the cause rules, each after MPI_Init
// otherwise. stop ends it.
func (o *HarvestOptions) Prefetch() (stop func()) {
	pf := hostinfo.StartPrefetch(o.plan.Python, o.getenv)
	o.toolchain = pf.Toolchain
	return pf.Stop
}

// ProbeInProcess reads Python's versions with call, in the calling
// interpreter, as a load's (Options.ProbeInProcess): the Python front
// end's harvest starts no child for them.
func (o *HarvestOptions) ProbeInProcess(call func(script string, want []byte) ([]byte, error)) {
	o.toolchain = hostinfo.InProcess(call, o.plan.Python, o.getenv)
}

// HarvestMeta is what rank 0 of a harvest records in the layer, given
// its DEST: this machine and the toolchain of the presets DEST was
// installed with (its install record), read by toolchain (the job's
// Python: HarvestRequest.Python, else $KBUNDLE_PYTHON, else python3 on
// PATH), as warm records them for the base.
func HarvestMeta(toolchain func(keys []string) (map[string]string, error)) func(dest string) map[string]string {
	return func(dest string) map[string]string {
		var presets []*preset.Preset
		if rec, err := bundle.ReadInstallRecord(dest); err == nil {
			presets, _ = preset.ParseList(rec.Presets...)
		}
		m := hostinfo.Collect()
		tc, _ := toolchain(preset.ToolchainKeys(presets))
		maps.Copy(m, tc)
		return m
	}
}

// SetFailpoint replaces the plan's failpoint (tests: the CLI knows its
// MPI rank only once MPI is up).
func (o *HarvestOptions) SetFailpoint(f func(step string)) { o.plan.Failpoint = f }

// Plan returns the harvest's plan once the job id is known (agreeStart): Dest
// as load's (the one given, absolute, or the job's default node-local
// directory). Without MPI the process is one node.
func (o HarvestOptions) Plan(job string, usingMPI bool) (harvest.Plan, error) {
	p := o.plan
	var err error
	p.Dest, err = Dest(o.dest, o.getenv, job)
	if o.dest == "" {
		// The job's default DEST: a bare mpirun's harvest has another job
		// id than its load had, so each leader looks for the tree (U33).
		p.Search = load.DestPrefix(o.getenv("TMPDIR"), UserName())
	}
	p.Job = job
	if !usingMPI {
		p.RanksPerNode = 0
	}
	// One reading of this node's machine and toolchain (a Python probe)
	// serves both the layer's record (Meta, rank 0) and the cause rules
	// (Local): rank 0 may need both.
	p.Local = onceByDest(HarvestMeta(o.toolchain))
	if !p.DryRun {
		p.Meta = p.Local
	}
	return p, err
}

// HarvestOutcome is what a harvest did, in one JSON shape: kbundle_harvest's
// answer (every rank). On success OK is true, the summary's fields
// (harvest.Summary, as `kbundle harvest --json` prints it) are filled and
// Report holds the lines `kbundle harvest` prints; otherwise Kind, Reason
// (lines, without the "kbundle: " prefix) and Hint say why. Fields are
// only ever added.
type HarvestOutcome struct {
	OK     bool   `json:"ok"`
	Kind   Kind   `json:"kind,omitempty"`
	Reason string `json:"reason,omitempty"`
	Hint   string `json:"hint,omitempty"`
	harvest.Summary
	// Report is HarvestReport's lines, without the "kbundle: " prefix.
	Report []string `json:"report"`
	// Warnings are the lines rank 0 prints as warnings, without the
	// "kbundle: " prefix (none yet: the report names what was skipped).
	Warnings []string `json:"warnings"`
}

// Harvested is the outcome of a harvest that returned sum.
func Harvested(f Front, sum *harvest.Summary) HarvestOutcome {
	o := HarvestOutcome{OK: true, Summary: *sum, Report: HarvestReport(f, sum), Warnings: []string{}}
	for _, l := range o.Report {
		if strings.HasPrefix(l, "warning: ") {
			// The report's own warnings (records lost, an untrusted set):
			// the Python front raises them (KbundleWarning), the CLI
			// prints the report.
			o.Warnings = append(o.Warnings, l)
		}
	}
	if o.Nodes == nil {
		o.Nodes = []harvest.NodeReport{}
	}
	return o
}

// HarvestFailure is the outcome of a harvest that failed with err, in
// front f's words; its Kind is KindOf's (a failure at rank 0 or a node,
// nothing published: Failed).
func HarvestFailure(f Front, err error) HarvestOutcome {
	var hint string
	switch {
	case errors.Is(err, mpi.ErrNotInitialized):
		hint = initHint("harvest")
	case errors.Is(err, bundle.ErrTrustPolicy), errors.Is(err, mpi.ErrThreadLevel), errors.Is(err, mpi.ErrABI):
		hint = Hint(f, err)
	} // else: harvest's messages say what to do (merge, run it again)
	return HarvestOutcome{Kind: KindOf(err), Reason: err.Error() + refusalFix(f, err), Hint: hint, Report: []string{}, Warnings: []string{}}
}

// refusalFix is what to pass, in front f's words, to settle err when it
// is a harvest.Refusal naming a fix; "" otherwise.
func refusalFix(f Front, err error) string {
	var r *harvest.Refusal
	if !errors.As(err, &r) {
		return ""
	}
	v := r.Fix.Value
	switch r.Fix.Field {
	case harvest.FixBundle:
		if v == "" {
			v = "PATH or set KBUNDLE_BUNDLE"
		}
		return "; pass " + f.spell("bundle") + v
	case harvest.FixDest:
		if v == "" {
			v = [...]string{CLI: "the one this job used", Python: " the one this job used"}[f]
		}
		return "; pass " + f.spell("to") + v
	}
	return ""
}

// Harvest harvests over world what o says, as front f does; collective.
// local is this rank's error from ResolveHarvest: Python's ranks agree on
// theirs first (only rank 0 needs a set), so that nobody enters the
// harvest alone; the CLI's are the same on every rank and end it before
// MPI. usingMPI: world is MPI's. Every rank returns the same outcome,
// except a Comm failure; on success it is Harvested's.
func Harvest(ctx context.Context, world broadcast.NodeComm, f Front, o HarvestOptions, local error, usingMPI bool) HarvestOutcome {
	var plan harvest.Plan
	local, err := agreeStart(world, f, o.getenv, local, func(job string, placed broadcast.Placement) (err error) {
		plan, err = o.Plan(job, usingMPI)
		plan.Placement = placed
		return err
	})
	if err != nil {
		return HarvestFailure(f, AtComm(err))
	}
	if f == Python && local != nil {
		local = &usageError{local} // argument problems: ErrUsage is not on the wire
	}
	if local != nil {
		return HarvestFailure(f, local)
	}
	sum, err := harvest.Run(ctx, world, plan)
	if err != nil {
		if sum == nil {
			err = AtComm(err) // no outcome from rank 0: this rank's failure
		}
		return HarvestFailure(f, err)
	}
	return Harvested(f, sum)
}

// HarvestReport is the report of a harvest that returned s, as rank 0
// prints it (each line after "kbundle: "), the same words from every
// front end but for what to type (--to, dest=): a line a node and preset
// (harvest.UseReport), a line a node, then what was written. The job's verdict
// (Summary.Verdict) is not in it: the CLI prints it last.
func HarvestReport(f Front, s *harvest.Summary) []string {
	lines := append(harvest.UseReport(s), nodeLines(f, s)...)
	switch {
	case s.DryRun:
		lines = append(lines, fmt.Sprintf("dry run: would write %s (%s) to %s", plural(s.Files, "file"), plural(s.Units, "cache unit"), s.Set))
	case s.Layer == "":
		lines = append(lines, fmt.Sprintf("nothing new: no layer written to %s", s.Set))
	default:
		what := "a new layer"
		if s.Base {
			what = "the set's first bundle"
		}
		whole := ""
		if s.Kept > 0 {
			// More files than the nodes' lines counted (U43): a unit goes
			// whole, with its unchanged files.
			whole = fmt.Sprintf("; %d unchanged, as each cache unit goes whole", s.Kept)
		}
		lines = append(lines, fmt.Sprintf("wrote %s, %s: %s (%s, %s%s)", what, s.Layer, plural(s.Files, "file"), plural(s.Units, "cache unit"), HumanBytes(s.Bytes), whole))
	}
	if s.Untrusted != "" {
		lines = append(lines, "warning: kbundle load will refuse this set (exit 3): "+s.Untrusted)
	}
	if len(s.Replaced) > 0 {
		what := "replaces"
		if s.DryRun || s.Layer == "" {
			what = "would replace"
		}
		lines = append(lines, fmt.Sprintf("the layer %s in the set's view (the newest layer wins): %s", what, bundle.Printable(strings.Join(s.Replaced, ", "))))
	}
	lines = append(lines, mergeReport(f, s)...)
	lines = append(lines, pruneReport(f, s)...)
	switch {
	case s.UseRecord != "" && s.UsesRecorded > 0:
		lines = append(lines, fmt.Sprintf("recorded the use of %s of the set, %s (%d more had a use recorded within a day)", plural(s.UnitsUsed-s.UsesRecorded, "cache unit"), s.UseRecord, s.UsesRecorded))
	case s.UseRecord != "":
		lines = append(lines, fmt.Sprintf("recorded the use of %s of the set, %s", plural(s.UnitsUsed, "cache unit"), s.UseRecord))
	case s.UsesRecorded > 0:
		lines = append(lines, fmt.Sprintf("the use of the %s the job read was recorded within a day already: no use record written", plural(s.UsesRecorded, "cache unit")))
	}
	return lines
}

// mergeReport says how the nodes' copies of each whole-file database
// were merged (harvest.DBMerge), loudly where records were lost.
func mergeReport(f Front, s *harvest.Summary) []string {
	var lines []string
	for _, d := range s.Merged {
		name := bundle.Printable(d.Name)
		from := bundle.Printable(strings.Join(d.From, ", "))
		switch {
		case s.DryRun || s.Layer == "":
			lines = append(lines, fmt.Sprintf("would merge %s of %s, record by record: %s", plural(len(d.From), "copy"), name, from))
			continue
		case d.Fallback != "":
			fix := ""
			if strings.HasPrefix(d.Fallback, harvest.NoPython) && f == CLI {
				fix = " (pass --python PATH, a Python with sqlite3, or set KBUNDLE_PYTHON)"
			}
			lines = append(lines, fmt.Sprintf("warning: %s: %s; the layer holds the copy of %s only, and the records only the other nodes added are lost%s", name, bundle.Printable(d.Fallback), bundle.Printable(d.FallbackFrom), fix))
		default:
			conflicts := ""
			if d.Conflicts > 0 {
				conflicts = fmt.Sprintf(", %s on a key a lower rank's copy holds with other values (the lower rank's kept)", plural(int(d.Conflicts), "record"))
			}
			lines = append(lines, fmt.Sprintf("merged %s of %s, record by record (%s): %s, %d added to the lowest rank's%s", plural(len(d.From)-len(d.LeftOut), "copy"), name, from, plural(int(d.Records), "record"), d.Added, conflicts))
		}
		for _, l := range d.LeftOut {
			lines = append(lines, fmt.Sprintf("warning: %s: left out the copy of %s", name, bundle.Printable(l)))
		}
	}
	return lines
}

// onceByDest is f, remembering its answer for the last dest asked.
func onceByDest(f func(dest string) map[string]string) func(dest string) map[string]string {
	var (
		mu   sync.Mutex
		last string
		got  map[string]string
	)
	return func(dest string) map[string]string {
		mu.Lock()
		defer mu.Unlock()
		if got == nil || dest != last {
			got, last = f(dest), dest
		}
		return maps.Clone(got)
	}
}
