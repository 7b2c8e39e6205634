package bundle

import (
	"math"
	"slices"
	"strings"
	"time"
)

// Pruning bounds a set's size: when its merged view's raw size (its
// files' sizes, duplicates included) passes a limit, MergeSet writes the
// new base without the least recently used cache units, whole units
// only, down to 90 % of the limit (docs/FORMAT.md, "Pruning").

// A Unit is one cache unit of a set's merged view, as pruning sees it.
type Unit struct {
	Name  string `json:"unit"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
	// LastUse is the unit's last use: the latest a use record gives it,
	// else when the bundle holding it was written (its file's mtime; for
	// a delta layer, whichever is later).
	LastUse  time.Time `json:"last_use"`
	Recorded bool      `json:"recorded"`          // LastUse is a use a record gives (else a write time)
	Unknown  bool      `json:"unknown,omitempty"` // from a job whose reads were unknown (noatime): counted as used
	newest   time.Time // its files' newest mtime, for ties
}

// Units are the cache units of the set's merged view (Merged(unit);
// unit nil: every file is a unit of its own), sorted by name, with their
// sizes and last uses (uses: ReadUses's Units, nil for none).
// Directories belong to no unit.
func (s *OpenedSet) Units(unit func(string) string, uses map[string]Use) []Unit {
	return s.units(s.Merged(unit), unit, uses)
}

func (s *OpenedSet) units(merged []SetEntry, unit func(string) string, uses map[string]Use) []Unit {
	written := make([]time.Time, len(s.Read))
	for i, r := range s.Read {
		if r.f != nil {
			if fi, err := r.f.Stat(); err == nil {
				written[i] = fi.ModTime()
			}
		}
	}
	byName := map[string]*Unit{}
	holder := map[string]int{}
	var names []string
	for i := range merged {
		e := &merged[i]
		if e.Dir {
			continue
		}
		n := unitName(unit, e.Name)
		u := byName[n]
		if u == nil {
			u = &Unit{Name: n}
			byName[n] = u
			names = append(names, n)
		}
		u.Files++
		u.Bytes = addSat(u.Bytes, e.Size)
		if e.ModTime.After(u.newest) {
			u.newest = e.ModTime
		}
		holder[n] = max(holder[n], e.Layer)
	}
	slices.Sort(names)
	out := make([]Unit, 0, len(names))
	for _, n := range names {
		u := byName[n]
		li := holder[n]
		w := written[li]
		use, ok := uses[n]
		switch {
		case ok && (s.Layers[li].Seq == 0 || use.Time.After(w)):
			// A delta layer was written when its harvest ran: a record
			// older than that is of an earlier version of the unit.
			u.LastUse, u.Recorded, u.Unknown = use.Time, !use.Written, use.Unknown
		default:
			u.LastUse = w
		}
		out = append(out, *u)
	}
	return out
}

func unitName(unit func(string) string, name string) string {
	if unit == nil {
		return name
	}
	if u := unit(name); u != "" {
		return u
	}
	return name
}

// addSat is a+b, at most math.MaxInt64 (a hostile bundle's sizes).
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// RawSize is the raw size of the set's merged view (Merged(unit)): its
// files' sizes, duplicates included; what a size limit bounds.
func (s *OpenedSet) RawSize(unit func(string) string) int64 {
	var n int64
	for _, e := range s.Merged(unit) {
		n = addSat(n, e.Size)
	}
	return n
}

// A Prune is what bounding a set to a size drops.
type Prune struct {
	Limit  int64 `json:"limit_bytes"`
	Target int64 `json:"target_bytes"` // 90 % of Limit: what pruning goes down to
	Before int64 `json:"before_bytes"` // the merged view's raw size
	After  int64 `json:"after_bytes"`
	Units  int   `json:"units"` // before
	// Unknown counts the units whose last use is a job's that could not
	// see reads (noatime): counted as used then.
	Unknown      int    `json:"unknown_units"`
	Dropped      []Unit `json:"dropped"` // least recently used first
	DroppedBytes int64  `json:"dropped_bytes"`
}

// PruneTarget is what pruning to limit goes down to: 90 % of it.
func PruneTarget(limit int64) int64 { return limit - limit/10 }

// PlanPrune chooses what bounding units to limit bytes drops: nothing
// while their total is at most limit; else whole units, least recently
// used first (ties: the unit whose newest file is older, then by name),
// until the total is at most PruneTarget(limit).
func PlanPrune(units []Unit, limit int64) *Prune {
	p := &Prune{Limit: limit, Target: PruneTarget(limit), Units: len(units), Dropped: []Unit{}}
	for _, u := range units {
		p.Before = addSat(p.Before, u.Bytes)
		if u.Unknown {
			p.Unknown++
		}
	}
	p.After = p.Before
	if p.Before <= limit {
		return p
	}
	order := slices.Clone(units)
	slices.SortFunc(order, func(a, b Unit) int {
		if c := a.LastUse.Compare(b.LastUse); c != 0 {
			return c
		}
		if c := a.newest.Compare(b.newest); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, u := range order {
		if p.After <= p.Target {
			break
		}
		p.Dropped = append(p.Dropped, u)
		p.DroppedBytes = addSat(p.DroppedBytes, u.Bytes)
		p.After -= u.Bytes
	}
	return p
}

// droppedSet is the names of p's dropped units (p nil: none).
func (p *Prune) droppedSet() map[string]bool {
	m := map[string]bool{}
	if p != nil {
		for _, u := range p.Dropped {
			m[u.Name] = true
		}
	}
	return m
}

// withoutUnits is merged without the entries of the units in drop: their
// files, and a directory that is a unit's (a Triton hash directory, the
// unit "dir/") with everything below it. Other directories stay, empty
// or not.
func withoutUnits(merged []SetEntry, unit func(string) string, drop map[string]bool) []SetEntry {
	if len(drop) == 0 {
		return merged
	}
	var dirs []string
	for u := range drop {
		if strings.HasSuffix(u, "/") {
			dirs = append(dirs, u)
		}
	}
	out := make([]SetEntry, 0, len(merged))
	for _, e := range merged {
		if !e.Dir && drop[unitName(unit, e.Name)] ||
			e.Dir && slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(e.Name+"/", d) }) {
			continue
		}
		out = append(out, e)
	}
	return out
}
