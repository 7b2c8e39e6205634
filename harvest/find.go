package harvest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
)

// Finding the DEST a load installed (issue 25, U33). A load's default
// DEST is named for the job (load.Dest: $TMPDIR/kbundle-USER-JOB); a bare
// mpirun or mpiexec gives each launch a job id of its own, so the
// harvest's launch names another directory than the load's did. A leader
// whose DEST was not given therefore looks for it in the node's install
// records: among its user's directories named like a default DEST, the
// trees kbundle installed from the set being harvested, on this host,
// that are still there.

// ErrRefused marks a harvest refused for its arguments, the same on
// every rank (exit 2 in the CLI): its set is not the one its DEST was
// loaded from, no set was given and no DEST names one, or two trees are
// equally likely to be the job's DEST.
var ErrRefused = errors.New("harvest refused")

// A Refusal is an error matching ErrRefused: Msg says what is wrong, and
// Fix which setting of the Plan would settle it. A front end words the
// fix (--bundle, bundle=); Error is Msg alone.
type Refusal struct {
	Msg string
	Fix Fix
}

// A Fix names the Plan field a new value of which settles a refusal
// (FixBundle, FixDest; "": none) and that value, "" when the user must
// choose it (which of two trees was the job's).
type Fix struct {
	Field string `json:",omitempty"`
	Value string `json:",omitempty"`
}

// The fields a Fix names.
const (
	FixBundle = "bundle" // Plan.Bundle: the set
	FixDest   = "dest"   // Plan.Dest: the node-local tree
)

func (e *Refusal) Error() string        { return e.Msg }
func (e *Refusal) Is(target error) bool { return target == ErrRefused }

func refusef(fix Fix, format string, a ...any) error {
	return &Refusal{Msg: fmt.Sprintf(format, a...), Fix: fix}
}

// destFound is where a leader harvests: its DEST, how it was found
// (findDest's note) or why it was refused, and the set the newest tree
// here was loaded from when none was from the set (other).
type destFound struct{ dest, note, other, refused string }

// maxSetPath bounds the set's path rank 0 shares.
const maxSetPath = 1 << 16

// shareSet gives every rank rank 0's set (its Plan.Bundle, else the set
// its DEST was loaded from: "" when none names one) and finds each
// leader's DEST (findDest). Collective over world.
func shareSet(world broadcast.NodeComm, plan *Plan, leader bool, where *destFound) error {
	*where = destFound{dest: plan.Dest}
	suffix := ""
	if plan.RanksPerNode > 0 {
		suffix = ".node" + strconv.Itoa(world.Rank()/plan.RanksPerNode)
	}
	find := func(set string) {
		if !leader || plan.Search == "" {
			return
		}
		d, note, other, err := findDest(plan.Dest, plan.Search, suffix, set, plan.Host)
		*where = destFound{dest: d, note: note, other: other}
		if err != nil {
			where.refused = err.Error()
		}
	}
	var set []byte
	foundFirst := world.Rank() == 0 && plan.Bundle == ""
	switch {
	case foundFirst:
		find("")
		if rec, err := bundle.ReadInstallRecord(where.dest); err == nil {
			set = []byte(rec.Layers[0].Path)
			// Its line names the set, as the other nodes' do.
			where.note = strings.Replace(where.note, "loaded from any set", "loaded from "+string(set), 1)
		}
	case world.Rank() == 0:
		set = []byte(absDest(plan.Bundle))
	}
	set, err := broadcast.BcastBytes(world, set, maxSetPath)
	if err != nil {
		return commErr("the set's path", err)
	}
	if world.Rank() != 0 || foundFirst {
		plan.Bundle = string(set) // rank 0's given one stays as given, for its messages
	}
	if !foundFirst {
		find(string(set))
	}
	return nil
}

// checkSet is rank 0's check of the leaders' DESTs against the set,
// before anything is chosen: a leader's refusal, no set at all, or a
// DEST loaded from another set than the one harvested into (which would
// get only what the job added to that other set).
func checkSet(plan Plan, lists []*list) error {
	for _, l := range lists {
		if l.Refused != "" {
			return refusef(Fix{Field: FixDest}, "%s (rank %d): %s", l.Host, l.First, l.Refused) // a tie (findDest)
		}
	}
	if plan.Bundle == "" {
		return refusef(Fix{Field: FixBundle}, "no bundle set: %s names none (it holds no install record)", lists[0].Dest)
	}
	for _, l := range lists {
		if bundle.HoldsLayers(l.Dest, plan.Bundle) && !l.Missing {
			return refusef(Fix{}, "%s (rank %d): %s is, or holds, the set's layer folder %s: the layer would be written into DEST; load into a DEST outside it", l.Host, l.First, l.Dest, bundle.LayerDir(plan.Bundle))
		}
		if l.Set != "" && !sameSet(l.Set, plan.Bundle) {
			return refusef(Fix{Field: FixBundle, Value: l.Set}, "%s (rank %d): %s was loaded from %s, not from %s: harvesting into %s would write only what this job added to the other set",
				l.Host, l.First, l.Dest, l.Set, plan.Bundle, plan.Bundle)
		}
	}
	return nil
}

// tieWindow: two trees installed within it of each other are equally
// likely to be the job's (two loads of the same set at once on the node).
const tieWindow = 2 * time.Second

// fakeSuffix matches the name a fake node's DEST gets (broadcast.Nodes.Dest).
var fakeSuffix = regexp.MustCompile(`\.node[0-9]+$`)

// A found is one candidate tree: its path and install record.
type found struct {
	dest      string
	installed time.Time
	set       string // its record's set: the path of its first layer
}

// findDest is the DEST a leader harvests when none was given: dest (the
// job's default) when it exists, else the newest tree among this user's
// directories named prefix* (with suffix, a fake node's, at the end;
// without, none) whose install record names set ("": any set) and this
// host. note says how it was found ("": dest itself); a tie of two trees
// is an error matching ErrRefused that names both. None found: dest, the
// note of what was looked for and the set the newest tree of another set
// was loaded from ("": none).
func findDest(dest, prefix, suffix, set, host string) (string, string, string, error) {
	if _, err := os.Lstat(dest); !errors.Is(err, fs.ErrNotExist) {
		return dest, "", "", nil
	}
	all, err := candidates(prefix, suffix, host)
	if err != nil {
		return dest, fmt.Sprintf("cannot look for trees in %s: %v", filepath.Dir(prefix), err), "", nil
	}
	cands := slices.DeleteFunc(slices.Clone(all), func(f found) bool { return set != "" && !sameSet(f.set, set) })
	from := "any set"
	if set != "" {
		from = set
	}
	if len(cands) == 0 {
		note, other := fmt.Sprintf("nothing loaded here from %s: not at %s, nor in any tree of yours named %s*%s", from, dest, prefix, suffix), ""
		if len(all) > 0 {
			note += fmt.Sprintf(" (the newest, %s, was loaded from %s)", all[0].dest, all[0].set)
			other = all[0].set
		}
		return dest, note, other, nil
	}
	if len(cands) > 1 && cands[0].installed.Sub(cands[1].installed) < tieWindow {
		return dest, "", "", refusef(Fix{Field: FixDest}, "two trees loaded from %s here are equally likely to be this job's DEST: %s and %s (installed %s and %s)",
			from, cands[0].dest, cands[1].dest, stamp(cands[0].installed), stamp(cands[1].installed))
	}
	return cands[0].dest, fmt.Sprintf("the newest tree loaded from %s here, installed %s (this launch's job id names %s, which does not exist)",
		from, stamp(cands[0].installed), dest), "", nil
}

func stamp(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") }

// candidates lists the trees findDest chooses from, newest first: this
// user's directories named prefix* (with suffix; without, no fake
// node's) holding an install record of this host that names them.
func candidates(prefix, suffix, host string) ([]found, error) {
	trees, err := bundle.MineTrees(prefix, os.Geteuid())
	if err != nil {
		return nil, err
	}
	var out []found
	for _, p := range trees {
		n := filepath.Base(p)
		if (suffix == "" && fakeSuffix.MatchString(n)) || (suffix != "" && !strings.HasSuffix(n, suffix)) {
			continue
		}
		rec, err := bundle.ReadInstallRecord(p)
		if err != nil || rec.Dest != p || (host != "" && rec.Host != "" && rec.Host != host) {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, rec.Installed)
		if err != nil {
			continue
		}
		out = append(out, found{dest: p, installed: t, set: rec.Layers[0].Path})
	}
	slices.SortFunc(out, func(a, b found) int { return b.installed.Compare(a.installed) })
	return out, nil
}

// sameSet says whether paths a and b name the same set: the same path,
// or the same file, or names of the same base in the same directory
// (symlinks in the path, a set not written yet).
func sameSet(a, b string) bool {
	if a == b {
		return true
	}
	if ai, err := os.Stat(a); err == nil {
		if bi, err := os.Stat(b); err == nil {
			return os.SameFile(ai, bi)
		}
	}
	if filepath.Base(a) != filepath.Base(b) {
		return false
	}
	ad, err1 := os.Stat(filepath.Dir(a))
	bd, err2 := os.Stat(filepath.Dir(b))
	return err1 == nil && err2 == nil && os.SameFile(ad, bd)
}
