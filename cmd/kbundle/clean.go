package main

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/urfave/cli/v2"
)

// cleanJSON is `kbundle clean --json`; fields are only ever added. When a
// DEST named was refused (exit 1), ok is false and the failure's fields
// say why, as stderr does.
type cleanJSON struct {
	jsonHead
	Removed []string `json:"removed"` // the DESTs removed
	Missing []string `json:"missing"` // DESTs that did not exist: nothing to do
	Stale   []string `json:"stale"`   // stale temporaries removed
	Refused []string `json:"refused"` // DESTs left as they were (the reason is on stderr)
	// Left are the trees a selection (--job, --older-than, a job still
	// running) left, and the trees found (--all-mine, or --job and
	// --older-than without DEST) that clean's rules refused: not an error.
	Left []string `json:"left"`
	// WouldRemove are the trees --dry-run would remove.
	WouldRemove []string `json:"would_remove,omitempty"`
}

// dryRunKeep is the reason Keep gives under --dry-run for a tree that
// passed every check: it would be removed.
const dryRunKeep = "\x00dry run"

func init() {
	register(&cli.Command{
		Name:      "clean",
		Usage:     "remove node-local trees that kbundle installed, and the temporaries killed kbundle runs left",
		UsageText: "kbundle clean [--job ID] [--older-than D] [--all-mine] [--user U] [--stale DIR]... [--dry-run] [--json] [-q] [DEST...]",
		Description: "Removes each DEST only when kbundle installed it: a directory of yours, not a symlink or a mount point,\n" +
			"holding " + bundle.InstalledMarker + " (the rule --force follows), that no live load is installing now.\n" +
			"Anything else is refused and left as it is. A DEST that does not exist is nothing to do.\n" +
			"Without DEST (nor --job, --older-than, --all-mine, --stale), $KBUNDLE_LOCAL_DIR, load's default DEST.\n" +
			"--all-mine (and --job or --older-than without DEST) also considers every tree of yours named like the\n" +
			"default DEST ($TMPDIR/kbundle-$USER-*); --job and --older-than then keep those they do not select,\n" +
			"and --all-mine and --older-than never remove a tree whose job still runs on this node (run in a PID\n" +
			"namespace of its own, a container's, where those jobs are not seen, they keep every tree).\n" +
			"Then, beside each DEST and in each --stale DIR, it removes the temporaries of your kbundle runs on\n" +
			"this host that were killed before they could clean up.\n" +
			"It runs once per task: job scripts run it on every node for the DEST their own load printed.",
		Flags: []cli.Flag{jsonFlag, quietFlag,
			&cli.StringSliceFlag{Name: "stale", Usage: "also remove, in `DIR`, the temporaries killed kbundle runs of yours left (repeatable)"},
			&cli.StringFlag{Name: "job", Usage: "remove only the tree job `ID` installed (its install record's job)"},
			&cli.GenericFlag{Name: "older-than", Value: &olderThanValue{}, Usage: "remove only trees installed longer ago than `D` (seconds, or with a unit: 90m, 48h), never one of a job still running on this node"},
			&cli.BoolFlag{Name: "dry-run", Usage: "say what would be removed, and how much of each tree changed since its install; remove nothing"},
			&cli.BoolFlag{Name: "all-mine", Usage: "consider every tree of yours named like the default DEST ($TMPDIR/kbundle-$USER-*)"},
			&cli.StringFlag{Name: "user", Usage: "root only (a Slurm epilog): act for user `U` (a name or uid): remove U's trees by the same rules, with U as the owner, and nothing U could not remove"}},
		Action: cleanAction,
	})
}

// olderThanValue is --older-than: seconds, or a duration with its unit
// (loadcmd.ParseTimeout's syntax).
type olderThanValue struct {
	d   time.Duration
	set bool
}

func (v *olderThanValue) Set(s string) error {
	d, err := loadcmd.ParseTimeout(s)
	if err != nil {
		return fmt.Errorf("%q: want a number of seconds or a duration such as 90m or 48h", s)
	}
	v.d, v.set = d, true
	return nil
}

func (v *olderThanValue) String() string {
	if v == nil || !v.set {
		return ""
	}
	return v.d.String()
}

// cleanUser is whose trees clean removes: the caller's, or --user's
// (root only, as a Slurm epilog does), set in opt.
func cleanUser(c *cli.Context, opt *bundle.CleanOptions) (name string, uid int, err error) {
	name, uid = loadcmd.UserName(), os.Geteuid()
	if u := c.String("user"); u != "" {
		if os.Geteuid() != 0 {
			return "", 0, cli.Exit("--user "+safe(u)+": only root can remove another user's trees (as a Slurm epilog does)", exitUsage)
		}
		if name, uid, err = lookupUser(u); err != nil {
			return "", 0, cli.Exit("--user "+safe(u)+": "+err.Error(), exitUsage)
		}
		opt.ForUser, opt.UID = true, uid
	}
	return name, uid, nil
}

// keepRule is why clean keeps a tree ("": it goes), from its install
// record: another job's (--job), not old enough (--older-than), its job
// still running on this node, or running jobs that cannot be seen from
// here (X9) with --older-than or --all-mine.
func keepRule(job string, older *olderThanValue, allMine bool, uid int) func(rec *bundle.InstallRecord) string {
	byAge := older != nil && older.set
	var running map[string]bool
	unseen := "" // why the running jobs cannot be seen from here (X9)
	if byAge || allMine {
		running = runningJobs(uint32(uid))
		ns, _ := os.Readlink("/proc/self/ns/pid")
		unseen = pidNamespaceNote(readFile("/proc/self/status"), ns)
	}
	now := time.Now()
	return func(rec *bundle.InstallRecord) string {
		if job != "" || byAge {
			if rec == nil {
				return "it holds no install record this kbundle reads (an older kbundle's marker), so neither its job nor its age is known"
			}
		}
		if job != "" && rec.Job != job {
			if rec.Job == "" {
				return "no job is recorded as its installer, not job " + job
			}
			return "job " + rec.Job + " installed it, not job " + job
		}
		if byAge {
			t, err := time.Parse(time.RFC3339Nano, rec.Installed)
			if err != nil {
				return "its install time " + strconv.Quote(rec.Installed) + " cannot be read"
			}
			if age := now.Sub(t); age <= older.d {
				return fmt.Sprintf("installed %s ago, not longer than %s", elapsed(age), older.d)
			}
		}
		if rec != nil && rec.Job != "" && running[rec.Job] {
			return "job " + rec.Job + " still runs on this node"
		}
		if unseen != "" && (byAge || allMine) {
			return unseen + ", so --all-mine and --older-than keep every tree: run them in the host's PID namespace, or name a DEST whose job you know ended (without them)"
		}
		return ""
	}
}

// removeStale removes from each of dirs, once, what a kbundle run that
// was killed left there (bundle.RemoveStale), and returns what it removed.
func removeStale(c *cli.Context, dirs []string) []string {
	var removed []string
	seen := map[string]bool{}
	for _, dir := range dirs {
		if seen[dir] {
			continue
		}
		seen[dir] = true
		gone, err := bundle.RemoveStale(dir)
		for _, p := range gone {
			say(c, "removed %s, left by a kbundle run that was killed", safe(p))
		}
		removed = append(removed, gone...)
		if err != nil {
			warn(c, "%v", err)
		}
	}
	return removed
}

// addMine adds to the DESTs named the trees of user name (uid) that
// are not among them (mineTrees).
func addMine(c *cli.Context, dests []string, name string, uid int) []string {
	named := len(dests)
	found, err := mineTrees(name, uid)
	if err != nil {
		warn(c, "cannot list the trees named %s*: %v", safe(minePrefix(name)), err)
	}
	for _, f := range found {
		if !slices.Contains(dests[:named], f) {
			dests = append(dests, f)
		}
	}
	return dests
}

// cleanFailure is clean's failure when it refused DESTs (of the named
// ones), said in out's head with the refusals stderr said; nil when it
// refused none.
func cleanFailure(out *cleanJSON, refusals []string, named int) error {
	var fail error
	switch len(out.Refused) {
	case 0:
		return nil
	case 1:
		fail = cli.Exit("", exitError)
	default:
		fail = cli.Exit(fmt.Sprintf("%d of %d destinations were not kbundle's and were left as they were", len(out.Refused), named), exitError)
	}
	if msg := fail.Error(); msg != "" {
		refusals = append(refusals, msg)
	}
	out.jsonHead = failedHead(exitError, strings.Join(refusals, "\nkbundle: "), fail)
	return fail
}

func cleanAction(c *cli.Context) error {
	dests, stale := c.Args().Slice(), c.StringSlice("stale")
	job, allMine := c.String("job"), c.Bool("all-mine")
	older, _ := c.Generic("older-than").(*olderThanValue)
	byAge := older != nil && older.set
	if d := os.Getenv("KBUNDLE_LOCAL_DIR"); len(dests) == 0 && len(stale) == 0 && job == "" && !byAge && !allMine && d != "" {
		dests = []string{d} // load's and harvest's default DEST
	}
	if len(dests) == 0 && len(stale) == 0 && job == "" && !byAge && !allMine {
		return cli.Exit("usage: kbundle clean [--job ID] [--older-than D] [--all-mine] [--stale DIR]... [DEST...] (see kbundle clean --help)", exitUsage)
	}
	opt := &bundle.CleanOptions{}
	name, uid, err := cleanUser(c, opt)
	if err != nil {
		return err
	}
	named := len(dests)
	if allMine || (named == 0 && (job != "" || byAge)) {
		dests = addMine(c, dests, name, uid)
	}
	opt.Keep = keepRule(job, older, allMine, uid)
	dry, keep := c.Bool("dry-run"), opt.Keep
	out := cleanJSON{jsonHead: okHead(), Removed: []string{}, Missing: []string{}, Stale: []string{}, Refused: []string{}, Left: []string{}}
	var refusals []string // as stderr says them
	for i, d := range dests {
		opt.Keep = func(rec *bundle.InstallRecord) string {
			switch why := keep(rec); {
			case why != "":
				return why
			case dry:
				return dryRunKeep
			}
			unharvested(c, d) // it goes now
			return ""
		}
		res, err := bundle.Clean(d, opt)
		switch {
		case err != nil && i >= named:
			say(c, "left %s: %v", safe(d), strings.TrimPrefix(err.Error(), d+": destination refused: "))
			out.Left = append(out.Left, d)
		case err != nil:
			fmt.Fprintf(c.App.ErrWriter, "kbundle: %v\n", err)
			out.Refused = append(out.Refused, d)
			refusals = append(refusals, err.Error())
		case res.Kept == dryRunKeep:
			say(c, "would remove %s%s", safe(d), changedNote(d))
			out.WouldRemove = append(out.WouldRemove, d)
		case res.Kept != "":
			say(c, "left %s: %s", safe(d), res.Kept)
			out.Left = append(out.Left, d)
		case res.Removed:
			say(c, "removed %s", safe(d))
			out.Removed = append(out.Removed, d)
		default:
			say(c, "%s: nothing to remove (it does not exist)", safe(d))
			out.Missing = append(out.Missing, d)
		}
		if abs, err := filepath.Abs(d); err == nil {
			stale = append(stale, filepath.Dir(abs))
		}
	}
	if len(dests) == 0 && len(stale) == 0 {
		say(c, "nothing to remove: no tree named %s*", safe(minePrefix(name)))
	}
	if !dry { // a dry run removes nothing
		out.Stale = append(out.Stale, removeStale(c, stale)...)
	}
	fail := cleanFailure(&out, refusals, named)
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, out); err != nil {
			return err
		}
	}
	return fail
}

// lookupUser resolves --user: a name or a uid.
func lookupUser(s string) (name string, uid int, err error) {
	u, err := user.Lookup(s)
	if err != nil {
		if u, err = user.LookupId(s); err != nil {
			return "", 0, fmt.Errorf("no such user")
		}
	}
	uid, err = strconv.Atoi(u.Uid)
	if err != nil {
		return "", 0, fmt.Errorf("uid %q is not a number", u.Uid)
	}
	return u.Username, uid, nil
}

// pidNamespaceNote says why the jobs running on this node cannot be
// told from this process ("" when they can), given /proc/self/status and
// the link /proc/self/ns/pid: it runs in a PID namespace other than the
// host's initial one (a container's, as Apptainer's --pid or unshare
// --pid make), whose /proc shows none of the host's processes (X9 of the
// 2026-12-01b review: --all-mine removed the DEST of a job running
// outside). Told by the namespace's inode (the initial one's is fixed,
// PROC_PID_INIT_INO) or, where /proc is the host's, by an NSpid line of
// more than one pid. A node whose every job runs in one such namespace
// is taken for a container too: clean then keeps its trees.
func pidNamespaceNote(status []byte, nsLink string) string {
	const initNS = "pid:[4026531836]" // PROC_PID_INIT_INO
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if f := strings.Fields(rest); len(f) > 1 {
				return "this clean runs in a PID namespace of its own (a container's: NSpid " + strings.Join(f, " ") + "), where the jobs running on this node are not seen"
			}
		}
	}
	if nsLink != "" && nsLink != initNS {
		return "this clean runs in a PID namespace of its own (a container's: " + nsLink + ", not the host's " + initNS + "), where the jobs running on this node are not seen"
	}
	return ""
}

// readFile is os.ReadFile without its error (nil).
func readFile(name string) []byte {
	b, _ := os.ReadFile(name)
	return b
}

// runningJobs are the job ids of the jobs of uid still running on this
// node: every value of a loadcmd.JobIDVars variable in the environment of a
// process of uid (/proc/PID/environ; this very process's included), and
// "pidN" for each process N of uid (the job id a load without a scheduler
// records: its rank 0's process id). A process whose environment cannot
// be read counts by its pid alone.
func runningJobs(uid uint32) map[string]bool {
	jobs := map[string]bool{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return jobs
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		fi, err := os.Stat(filepath.Join("/proc", e.Name()))
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != uid {
			continue
		}
		jobs["pid"+e.Name()] = true
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			k, v, ok := bytes.Cut(kv, []byte{'='})
			if ok && len(v) > 0 && slices.Contains(loadcmd.JobIDVars, string(k)) {
				jobs[string(v)] = true
			}
		}
	}
	return jobs
}

// changedNote says, for clean --dry-run, how much of the tree at dest
// changed since its install (what a harvest would give back, if it has
// not yet): "" when nothing did or it cannot tell (U44).
func changedNote(dest string) string {
	t := loadcmd.TreeStatus(dest)
	if t.State != loadcmd.StateInstalled || t.Tree == nil || t.Tree.Unchanged {
		return ""
	}
	if t.Harvested != nil {
		return fmt.Sprintf(" (changed since its install: %d new, %d changed, %d missing; harvested %s)", t.Tree.New, t.Tree.Changed, t.Tree.Missing, t.Harvested.Harvested)
	}
	return fmt.Sprintf(" (changed since its install: %d new, %d changed, %d missing, never harvested; kbundle harvest gives what the job compiled back to its set)", t.Tree.New, t.Tree.Changed, t.Tree.Missing)
}

// unharvested warns, before clean removes the tree at dest, when it
// changed since its install and was never harvested: what the job
// compiled goes with it (U44).
func unharvested(c *cli.Context, dest string) {
	t := loadcmd.TreeStatus(dest)
	if t.State == loadcmd.StateInstalled && t.Tree != nil && t.Tree.New+t.Tree.Changed > 0 && t.Harvested == nil {
		warn(c, "%s holds %d new and %d changed entries that were never harvested: removing them (kbundle harvest first gives them back to the set)", safe(dest), t.Tree.New, t.Tree.Changed)
	}
}
