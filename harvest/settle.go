package harvest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/hostlist"
)

// fileErr is the error of file f of node l: a file whose bytes are not
// those listed changed between its listing and its sending.
func fileErr(l *list, f File, err error) error {
	if errors.Is(err, bundle.ErrChecksum) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errChanged) {
		return fmt.Errorf("%s (rank %d): %s changed during the harvest (its bytes are not those listed); nothing was published: run kbundle harvest again once it is complete: %w", l.Host, l.First, f.Name, err)
	}
	return fmt.Errorf("%s (rank %d): %s: %w", l.Host, l.First, f.Name, err)
}

// publishErr is the error of a layer that could not be written or
// published (a full or read-only file system, a folder gone): it names
// the set, not the temporary beside it, and says what was kept (U48).
func publishErr(err error) error {
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) && strings.HasPrefix(filepath.Base(pe.Path), ".kbundle-tmp-") {
		msg = strings.Replace(msg, pe.Op+" "+pe.Path, pe.Op+" its temporary", 1)
	}
	return &harvestError{msg + "; nothing was published, and each node's DEST keeps what the job compiled: run kbundle harvest again once that is fixed", err}
}

// A harvestError is an error in words of its own, wrapping its cause.
type harvestError struct {
	msg string
	err error
}

func (e *harvestError) Error() string { return e.msg }
func (e *harvestError) Unwrap() error { return e.err }

// errChanged: a file is no longer what was listed (its size, kind or owner).
var errChanged = errors.New("changed since listed")

func outcome(sum *Summary, err error) []byte {
	v := struct {
		Sum     *Summary
		Err     string
		Refused bool
		Fix     Fix
	}{Sum: sum}
	if err != nil {
		v.Err = "harvest: " + err.Error()
		v.Refused = errors.Is(err, ErrRefused)
		var r *Refusal
		if errors.As(err, &r) {
			v.Fix = r.Fix
		}
	}
	b, _ := json.Marshal(v)
	return b
}

// jobUses is what the job's reads say: each unit read on any node, at
// its newest access time (at most now). Where a node could not tell,
// every unit of the set (units) counts as used now, Unknown. It fills
// sum's UnitsUsed and UsageUnknown.
func jobUses(sum *Summary, lists []*list, units []string, now time.Time) map[string]bundle.Use {
	uses := map[string]bundle.Use{}
	for _, l := range lists {
		for u, ns := range l.Used {
			t := time.Unix(0, ns)
			if t.After(now) {
				t = now // a node's clock ahead of rank 0's
			}
			if old, ok := uses[u]; !ok || t.After(old.Time) {
				uses[u] = bundle.Use{Time: t}
			}
		}
		if l.UsageUnknown != "" {
			sum.UsageUnknown = append(sum.UsageUnknown, l.Host)
		}
	}
	sum.UnitsUsed = len(uses)
	if len(sum.UsageUnknown) > 0 {
		for _, u := range units {
			uses[u] = bundle.Use{Time: now, Unknown: true}
		}
	}
	return uses
}

// settle is rank 0's last step, once the layer (if any) is published:
// it records the job's use of the set's units and, with MaxSize, prunes
// the set when its merged view passes the limit: not when some node
// could not tell what the job read, nor when the use could not be
// recorded (never on missing data). A dry run writes nothing and says
// what pruning would drop. What goes wrong here is said in the summary
// (PruneNote): the layer is published whatever it does.
func settle(ctx context.Context, plan Plan, look setLook, sum *Summary, lists []*list, choice [][]int, uses map[string]bundle.Use, now time.Time) {
	if plan.DryRun {
		if plan.MaxSize > 0 {
			dryPrune(plan, look, sum, lists, choice, uses, now)
		}
		return
	}
	fresh := newUses(plan, uses)
	sum.UsesRecorded = len(uses) - len(fresh)
	if len(fresh) > 0 {
		p, err := bundle.WriteUseRecord(ctx, plan.Bundle, &bundle.UseRecord{By: "harvest", Job: plan.Job, Host: plan.Host, Units: fresh})
		if err != nil {
			sum.PruneNote = fmt.Sprintf("the use of %d cache units was not recorded: %v (a job script that may not write the set: KBUNDLE_HARVEST=0)", len(fresh), err)
			return
		}
		sum.UseRecord = p
	}
	if plan.MaxSize <= 0 {
		return
	}
	s, err := bundle.OpenSet(plan.Bundle, &bundle.OpenOptions{Trusted: true, Trust: plan.Trust})
	if errors.Is(err, bundle.ErrNoSet) || errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		sum.PruneNote = "not pruned: " + err.Error()
		return
	}
	sum.SetBytes = s.RawSize(bundle.CacheUnit)
	s.Close()
	if sum.SetBytes <= plan.MaxSize {
		return
	}
	if len(sum.UsageUnknown) > 0 {
		sum.PruneNote = unknownNote(sum)
		return
	}
	res, err := bundle.MergeSet(ctx, plan.Bundle, &bundle.MergeOptions{
		LayerOptions: bundle.LayerOptions{Writer: plan.Writer, Trust: plan.Trust},
		Open:         &bundle.OpenOptions{Trusted: true, Trust: plan.Trust},
		Unit:         bundle.CacheUnit, MaxSize: plan.MaxSize,
	})
	if err != nil {
		sum.PruneNote = "pruning failed: " + err.Error()
		return
	}
	sum.Prune, sum.Folded, sum.SetBytes, sum.UsesSkipped = res.Prune, res.Folded, res.Prune.After, res.UsesSkipped
}

func unknownNote(sum *Summary) string {
	return fmt.Sprintf("not pruned: what the job read is unknown on %s (DEST mounted noatime)", hostlist.Format(sum.UsageUnknown))
}

// dryPrune says what settle's pruning would drop: the set as it is,
// with the job's uses and the units this harvest would write (as of
// now, whole) in place of theirs.
func dryPrune(plan Plan, look setLook, sum *Summary, lists []*list, choice [][]int, uses map[string]bundle.Use, now time.Time) {
	var units []bundle.Unit
	switch {
	case look.s != nil:
		su, err := bundle.ReadUses(plan.Bundle, plan.Trust)
		if err != nil {
			sum.PruneNote = "not pruned: " + err.Error()
			return
		}
		for u, v := range uses {
			if old, ok := su.Units[u]; !ok || v.Time.After(old.Time) {
				su.Units[u] = v
			}
		}
		units = look.s.Units(bundle.CacheUnit, su.Units)
	case !look.absent():
		sum.PruneNote = "not pruned: " + look.err.Error()
		return
	}
	fresh := map[string]*bundle.Unit{}
	for r, l := range lists {
		for _, i := range choice[r] {
			n := bundle.CacheUnit(l.Files[i].Name)
			if fresh[n] == nil {
				fresh[n] = &bundle.Unit{Name: n, LastUse: now}
			}
			fresh[n].Files++
			fresh[n].Bytes += l.Files[i].Size
		}
	}
	units = slices.DeleteFunc(units, func(u bundle.Unit) bool { return fresh[u.Name] != nil })
	for _, u := range fresh {
		units = append(units, *u)
	}
	p := bundle.PlanPrune(units, plan.MaxSize)
	sum.SetBytes = p.Before
	if len(p.Dropped) > 0 && len(sum.UsageUnknown) > 0 {
		sum.PruneNote = unknownNote(sum)
		return
	}
	sum.Prune = p
}

// useGrain is how close a unit's recorded last use must be to this job's
// for the job to record none of its own: pruning goes by the day, and a
// use record a job (even one that compiled nothing) filled PATH.d with
// files until the next merge (U51).
const useGrain = 24 * time.Hour

// newUses are the units of uses whose last use the set's use records do
// not hold yet to within useGrain: those this harvest records. Records
// that cannot be read count as none.
func newUses(plan Plan, uses map[string]bundle.Use) map[string]bundle.Use {
	if len(uses) == 0 {
		return uses
	}
	known, err := bundle.ReadUses(plan.Bundle, plan.Trust)
	if err != nil || known == nil {
		return uses
	}
	out := map[string]bundle.Use{}
	for u, use := range uses {
		if old, ok := known.Units[u]; ok && !old.Written && old.Unknown == use.Unknown && use.Time.Sub(old.Time) < useGrain {
			continue
		}
		out[u] = use
	}
	return out
}
