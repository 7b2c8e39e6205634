package harvest

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"maps"
	"slices"
	"strings"

	"github.com/kbundle/kbundle/bundle"
)

// setLook is rank 0's one opening of the set before it publishes (the
// view, the layer count and a dry run's pruning all read it); settle
// opens the set again only after a layer was published. s is the set,
// or nil and err why it could not be opened (bundle.ErrNoSet or
// fs.ErrNotExist: there is none yet).
type setLook struct {
	s   *bundle.OpenedSet
	err error
}

// lookAtSet opens set, untrusted: what it holds decides what is new,
// not what runs.
func lookAtSet(set string, trust *bundle.TrustPolicy) setLook {
	s, err := bundle.OpenSet(set, &bundle.OpenOptions{Trust: trust})
	return setLook{s, err}
}

// close closes the set; it may be called again.
func (l *setLook) close() {
	if l.s != nil {
		l.s.Close()
		l.s = nil
	}
}

// absent reports whether there is no set yet.
func (l setLook) absent() bool {
	return errors.Is(l.err, bundle.ErrNoSet) || errors.Is(l.err, fs.ErrNotExist)
}

// pending is how many layers the set has above its base's fold.
func (l setLook) pending() (int, error) {
	switch {
	case l.absent():
		return 0, nil
	case errors.Is(l.err, bundle.ErrTooLarge):
		return bundle.MaxLayers, nil
	case l.err != nil:
		return 0, l.err
	}
	n := len(l.s.Layers)
	if l.s.Layers[0].Seq == 0 {
		n--
	}
	return n, nil
}

// meta is the set's base's metadata: what the warm-up recorded of its
// machine and toolchain (nil: no set, or one that cannot be read).
func (l setLook) meta() map[string]string {
	if l.s == nil {
		return nil
	}
	return l.s.Read[0].Meta()
}

// view is the set's merged view, name → digest, and its cache units
// (none: empty).
func (l setLook) view() (map[string]string, []string) {
	if l.s == nil {
		return nil, nil
	}
	m := map[string]string{}
	units := map[string]bool{}
	for _, e := range l.s.Merged(bundle.CacheUnit) {
		if !e.Dir {
			m[e.Name] = bundle.FormatDigest(e.Digest)
			units[bundle.CacheUnit(e.Name)] = true
		}
	}
	return m, slices.Sorted(maps.Keys(units))
}

// choose picks each cache unit from the lowest rank holding a new or
// changed file of it, and counts per node. choice[r] are indices into
// lists[r].Files. What it picks is a tree (docs/FORMAT.md, "Names"): a
// unit with a file where a lower rank's chosen unit has a directory, or
// below one of its files (a file x on one node, x/y on another), is left
// out whole and reported skipped on its node (dropConflicts).
func choose(lists []*list, have map[string]string) (*Summary, [][]int) {
	sum := &Summary{}
	choice := make([][]int, len(lists))
	owner := map[string]int{} // unit → list index (lists are in rank order)
	seen := map[string]int{}  // name+digest → how many nodes hold it
	unitOf := make([][]string, len(lists))
	byUnit := map[string][]string{} // unit → its files in its owner's list
	for r, l := range lists {
		unitOf[r] = make([]string, len(l.Files))
		for i, f := range l.Files {
			u := bundle.CacheUnit(f.Name)
			unitOf[r][i] = u
			if !has(owner, u) {
				owner[u] = r
			}
			if owner[u] == r {
				byUnit[u] = append(byUnit[u], f.Name)
			}
			seen[f.Name+"\x00"+f.Dig]++
		}
	}
	// A unit the set holds already, file for file, is not taken again
	// (a DEST harvested twice without a load in between).
	held := map[string]bool{}
	for u := range owner {
		held[u] = len(have) > 0
	}
	for r, l := range lists {
		for i, f := range l.Files {
			if u := unitOf[r][i]; owner[u] == r && have[f.Name] != f.Dig {
				held[u] = false
			}
		}
	}
	conflict := dropConflicts(lists, owner, held, byUnit)
	units := map[string]bool{}
	for r, l := range lists {
		nr := NodeReport{Host: l.Host, FirstRank: l.First, LastRank: l.Last, Skipped: l.Skipped, Error: l.Err, NoRecord: l.NoRecord, MissingDir: l.Missing,
			Dest: l.Dest, DestNote: l.DestNote, OtherSet: l.OtherSet, UnitsUsed: len(l.Used), UsageUnknown: l.UsageUnknown}
		for i, f := range l.Files {
			u := unitOf[r][i]
			if held[u] {
				continue
			}
			if why, ok := conflict[u]; ok && owner[u] == r {
				nr.Skipped = append(slices.Clip(nr.Skipped), Skip{f.Name, why(f.Name)})
				continue
			}
			if !f.Kept {
				nr.Entries++
				nr.Bytes += f.Size
				if seen[f.Name+"\x00"+f.Dig] > 1 {
					nr.Elsewhere++
				}
			}
			if owner[u] == r {
				choice[r] = append(choice[r], i)
				nr.Chosen++
				units[u] = true
				sum.Files++
				sum.Bytes += f.Size
				if f.Kept {
					sum.Kept++
				}
			}
		}
		sum.Nodes = append(sum.Nodes, nr)
	}
	sum.Units = len(units)
	sum.Replaced = replacedInSet(lists, choice, have)
	return sum, choice
}

// replacedInSet says what of the set the layer's files drop by the
// merged view's kind-change rule (docs/FORMAT.md, "Merged view"; H1 of
// the 2026-12-01b review): a file x that the set holds as a directory
// drops the set's x/…, a file below a name the set holds as a file drops
// that file. One line each, sorted.
func replacedInSet(lists []*list, choice [][]int, have map[string]string) []string {
	if len(have) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(have))
	var out []string
	seen := map[string]bool{}
	for r, c := range choice {
		for _, i := range c {
			f := lists[r].Files[i].Name
			// The set's files below f: f was a directory there.
			lo, _ := slices.BinarySearch(names, f+"/")
			n := 0
			for j := lo; j < len(names) && strings.HasPrefix(names[j], f+"/"); j++ {
				n++
			}
			if n > 0 && !seen[f+"/"] {
				seen[f+"/"] = true
				files := fmt.Sprintf("%d files", n)
				if n == 1 {
					files = "1 file"
				}
				out = append(out, fmt.Sprintf("%s/ (%s: a directory in the set, a file in this job's DEST)", f, files))
			}
			// A parent of f the set holds as a file.
			for p := range parents(f) {
				if _, ok := have[p]; ok && !seen[p] {
					seen[p] = true
					out = append(out, p+" (a file in the set, a directory in this job's DEST)")
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func has(m map[string]int, k string) bool { _, ok := m[k]; return ok }

// dropConflicts settles what choose takes as a tree: the units owned
// (owner, not held) are taken in rank order, then by name, and one whose
// files do not fit with those taken before (a file where they have a
// directory, or a name below one of their files) is left out whole. It
// returns the units left out, each with the reason for each of its files.
// A layer's kind changes against the set are the merged view's to settle
// (the newest wins), not a conflict. byUnit holds each unit's files, in
// its owner's list.
func dropConflicts(lists []*list, owner map[string]int, held map[string]bool, byUnit map[string][]string) map[string]func(string) string {
	var order []string
	for u := range byUnit {
		if !held[u] {
			order = append(order, u)
		}
	}
	slices.SortFunc(order, func(a, b string) int {
		return cmp.Or(cmp.Compare(owner[a], owner[b]), strings.Compare(a, b))
	})
	files := map[string]int{}   // a file taken → its rank
	dirs := map[string]string{} // a directory implied by the files taken → one of them
	out := map[string]func(string) string{}
	for _, u := range order {
		var clash, with string
		for _, n := range byUnit[u] {
			if f, ok := dirs[n]; ok {
				clash, with = n, fmt.Sprintf("a file here and a directory on %s, whose %s the harvest takes", where(lists[files[f]]), f)
				break
			}
			for p := range parents(n) {
				if r, ok := files[p]; ok {
					clash, with = n, fmt.Sprintf("below %s, a file on %s, which the harvest takes", p, where(lists[r]))
					break
				}
			}
			if clash != "" {
				break
			}
		}
		if clash != "" {
			out[u] = func(n string) string {
				if n == clash {
					return with
				}
				return fmt.Sprintf("left out with %s, of its cache unit (%s)", clash, with)
			}
			continue
		}
		for _, n := range byUnit[u] {
			files[n] = owner[u]
			for p := range parents(n) {
				if _, ok := dirs[p]; ok {
					break
				}
				dirs[p] = n
			}
		}
	}
	return out
}

// parents yields the directories above name, the nearest first. It ends
// for any string (a leader's list is checked by the Writer, after choose:
// "/etc/x" yields "/etc" only).
func parents(name string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name[:i], '/') {
			if !yield(name[:i]) {
				return
			}
		}
	}
}

// where names a node as the report does: its host and first rank.
func where(l *list) string { return fmt.Sprintf("%s (rank %d)", l.Host, l.First) }
