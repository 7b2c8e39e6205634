package harvest

import (
	"fmt"
	"strings"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/hostlist"
)

// Report is the summary as lines: one per node of what it compiled that
// the set lacked (identical lines merged, hosts in hostlist form), then
// what was written. Names from DEST and from the set (skipped files,
// pruned units, errors naming them) go through bundle.Printable, so a
// name cannot send the terminal control sequences (X8 of the
// 2026-12-01b review).
func Report(s *Summary) []string {
	var rows []row
	for _, n := range s.Nodes {
		var text string
		switch {
		case n.MissingDir && n.DestNote != "":
			text = "no DEST: " + n.DestNote + "; pass --to the DEST load printed"
		case n.MissingDir:
			text = "no DEST at " + n.Dest + " (nothing loaded here)"
		case n.Error != "":
			text = "not harvested: " + bundle.Printable(n.Error)
		default:
			what := "entries"
			if n.Entries == 1 {
				what = "entry"
			}
			text = fmt.Sprintf("compiled %d %s (%s) the bundle lacked", n.Entries, what, Size(n.Bytes))
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
		rows = append(rows, row{n.Host, n.FirstRank, n.LastRank, text})
	}
	return merge(rows)
}

// A row is one node's line of a report, before merging.
type row struct {
	host        string
	first, last int
	text        string
}

// merge makes the rows lines, in order: the nodes of one text on one
// line, named in hostlist form (one node: its host and ranks).
func merge(rows []row) []string {
	type line struct {
		hosts []string
		ranks string
	}
	var order []string
	byText := map[string]*line{}
	for _, r := range rows {
		l := byText[r.text]
		if l == nil {
			l = &line{}
			byText[r.text] = l
			order = append(order, r.text)
		}
		l.hosts = append(l.hosts, r.host)
		l.ranks = fmt.Sprintf("rank %d", r.first)
		if r.last > r.first {
			l.ranks = fmt.Sprintf("ranks %d-%d", r.first, r.last)
		}
	}
	var out []string
	for _, text := range order {
		l := byText[text]
		who := l.hosts[0] + " (" + l.ranks + ")"
		if len(l.hosts) > 1 {
			who = hostlist.Format(l.hosts)
		}
		out = append(out, who+": "+text)
	}
	return out
}

// PruneReport says what settling the set did with Plan.MaxSize: what
// pruning dropped (a dry run: would drop), or why a set over the limit
// was not pruned; and a use that could not be recorded.
func PruneReport(s *Summary) []string {
	var out []string
	switch {
	case s.PruneNote != "" && s.MaxSize > 0 && s.SetBytes > s.MaxSize:
		out = append(out, fmt.Sprintf("warning: the set's %s are over --max-size %s: %s", Size(s.SetBytes), Size(s.MaxSize), bundle.Printable(s.PruneNote)))
	case s.PruneNote != "":
		out = append(out, "warning: "+bundle.Printable(s.PruneNote))
	case s.Prune != nil:
		out = append(out, PruneLines(s.Prune, s.DryRun)...)
		if s.Folded > 0 {
			what := fmt.Sprintf("%d layers", s.Folded)
			if s.Folded == 1 {
				what = "1 layer"
			}
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
// and merge's reports: one line of counts, then the units, least
// recently used first, at most maxNamed.
func PruneLines(p *bundle.Prune, dry bool) []string {
	if len(p.Dropped) == 0 {
		return []string{fmt.Sprintf("the set's %s are within --max-size %s: nothing to prune", Size(p.Before), Size(p.Limit))}
	}
	verb, lead := "dropped", "pruned"
	if dry {
		verb, lead = "would drop", "dry run: pruning would drop"
	}
	units := "cache units"
	if len(p.Dropped) == 1 {
		units = "cache unit"
	}
	out := []string{fmt.Sprintf("%s %d %s (%s), the least recently used, to bring the set from %s to %s (--max-size %s, down to 90 %%: %s)",
		lead, len(p.Dropped), units, Size(p.DroppedBytes), Size(p.Before), Size(p.After), Size(p.Limit), Size(p.Target))}
	if p.Unknown > 0 {
		out = append(out, fmt.Sprintf("%d units' use is unknown (a job's DEST was mounted noatime): counted as used then", p.Unknown))
	}
	for i, u := range p.Dropped {
		if i == maxNamed {
			out = append(out, fmt.Sprintf("%s %d more (--json lists them all)", verb, len(p.Dropped)-maxNamed))
			break
		}
		how := "written"
		if u.Recorded {
			how = "last used"
		}
		out = append(out, fmt.Sprintf("%s %s (%s, %s %s)", verb, bundle.Printable(u.Name), Size(u.Bytes), how, u.LastUse.UTC().Format(time.RFC3339)))
	}
	return out
}

// Size is n bytes as the report says it: 21 B, 3.1 MiB.
func Size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
