package loadcmd

import (
	"fmt"
	"strings"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/harvest"
	"github.com/kbundle/kbundle/internal/hostlist"
)

// The harvest's report, in front f's words: harvest.Summary holds the
// facts (sizes, bounds, counts, the set a tree was loaded from), and the
// lines here add what to type, --to or dest=.

// nodeLines is the summary as lines: one per node of what it compiled that
// the set lacked (identical lines merged, hosts in hostlist form), then
// what was written. Names from DEST and from the set (skipped files,
// pruned units, errors naming them) go through bundle.Printable, so a
// name cannot send the terminal control sequences (X8 of the
// 2026-12-01b review).
func nodeLines(f Front, s *harvest.Summary) []string {
	var rows []hostlist.Row
	for _, n := range s.Nodes {
		var text string
		switch {
		case n.MissingDir && n.DestNote != "":
			text = "no DEST: " + n.DestNote + noDestFix(f, n.OtherSet)
		case n.MissingDir:
			text = "no DEST at " + n.Dest + " (nothing loaded here)"
		case n.Error != "":
			text = "not harvested: " + bundle.Printable(n.Error)
		default:
			what := "entries"
			if n.Entries == 1 {
				what = "entry"
			}
			text = fmt.Sprintf("compiled %d %s (%s) the bundle lacked", n.Entries, what, HumanBytes(n.Bytes))
			if n.Elsewhere > 0 {
				text += fmt.Sprintf("; %d also on other nodes", n.Elsewhere)
			}
			if n.DestNote != "" {
				text += "; DEST " + n.Dest + ": " + n.DestNote
			}
			if n.UsageUnknown != "" {
				text += "; what it read is unknown (" + bundle.Printable(n.UsageUnknown) + "): every unit counts as used"
			}
		}
		if len(n.Skipped) > 0 {
			names := []string{}
			for _, sk := range n.Skipped {
				names = append(names, bundle.Printable(sk.Name)+" ("+bundle.Printable(sk.Why)+")")
			}
			text += "; skipped " + strings.Join(names, ", ")
		}
		rows = append(rows, hostlist.Row{Host: n.Host, First: n.FirstRank, Last: n.LastRank, Text: text})
	}
	return hostlist.Lines(rows)
}

// noDestFix is what to pass when no DEST was found: the DEST load used,
// or the set the newest tree here was loaded from (other, "" if none).
func noDestFix(f Front, other string) string {
	switch {
	case f == Python && other != "":
		return "; pass bundle=" + other + " to harvest the newest, or dest= the DEST load_bundle used"
	case f == Python:
		return "; pass dest= the DEST load_bundle used"
	case other != "":
		return "; pass --bundle " + other + " to harvest the newest, or --to the DEST load printed"
	}
	return "; pass --to the DEST load printed"
}

// maxSizeName is what f calls harvest's and merge's size bound.
func maxSizeName(f Front) string { return [...]string{CLI: "--max-size", Python: "max_size="}[f] }

// pruneReport says what settling the set did with Plan.MaxSize: what
// pruning dropped (a dry run: would drop), or why a set over the limit
// was not pruned; and a use that could not be recorded.
func pruneReport(f Front, s *harvest.Summary) []string {
	var out []string
	switch {
	case s.PruneNote != "" && s.MaxSize > 0 && s.SetBytes > s.MaxSize:
		out = append(out, fmt.Sprintf("warning: the set's %s are over %s %s: %s", HumanBytes(s.SetBytes), maxSizeName(f), HumanBytes(s.MaxSize), bundle.Printable(s.PruneNote)))
	case s.PruneNote != "":
		out = append(out, "warning: "+bundle.Printable(s.PruneNote))
	case s.Prune != nil:
		out = append(out, PruneLines(f, s.Prune, s.DryRun)...)
		if s.Folded > 0 {
			what := fmt.Sprintf("%d layers", s.Folded)
			if s.Folded == 1 {
				what = "1 layer"
			}
			// merge is the CLI's only: Python's users run it there too.
			out = append(out, "the pruning merge folded "+what+" into the set's base; kept for running readers (kbundle merge --grace)")
		}
	}
	for _, sk := range s.UsesSkipped {
		out = append(out, "warning: use record "+bundle.Printable(sk))
	}
	return out
}

// maxNamed bounds the dropped units PruneLines names.
const maxNamed = 10

// PruneLines says what pruning dropped (dry: would drop), for harvest's
// and merge's reports, in front f's words: one line of counts, then the units, least
// recently used first, at most maxNamed.
func PruneLines(f Front, p *bundle.Prune, dry bool) []string {
	if len(p.Dropped) == 0 {
		return []string{fmt.Sprintf("the set's %s are within %s %s: nothing to prune", HumanBytes(p.Before), maxSizeName(f), HumanBytes(p.Limit))}
	}
	verb, lead := "dropped", "pruned"
	if dry {
		verb, lead = "would drop", "dry run: pruning would drop"
	}
	units := "cache units"
	if len(p.Dropped) == 1 {
		units = "cache unit"
	}
	out := []string{fmt.Sprintf("%s %d %s (%s), the least recently used, to bring the set from %s to %s (%s %s, down to 90 %%: %s)",
		lead, len(p.Dropped), units, HumanBytes(p.DroppedBytes), HumanBytes(p.Before), HumanBytes(p.After), maxSizeName(f), HumanBytes(p.Limit), HumanBytes(p.Target))}
	if p.Unknown > 0 {
		out = append(out, fmt.Sprintf("%d units' use is unknown (a job's DEST was mounted noatime): counted as used then", p.Unknown))
	}
	for i, u := range p.Dropped {
		if i == maxNamed {
			more := fmt.Sprintf("%s %d more", verb, len(p.Dropped)-maxNamed)
			if f == CLI {
				more += " (--json lists them all)"
			}
			out = append(out, more)
			break
		}
		how := "written"
		if u.Recorded {
			how = "last used"
		}
		out = append(out, fmt.Sprintf("%s %s (%s, %s %s)", verb, bundle.Printable(u.Name), HumanBytes(u.Bytes), how, u.LastUse.UTC().Format(time.RFC3339)))
	}
	return out
}
