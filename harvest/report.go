package harvest

import (
	"fmt"
	"strings"

	"github.com/kbundle/kbundle/internal/hostlist"
)

// Report is the summary as lines: one per node of what it compiled that
// the set lacked (identical lines merged, hosts in hostlist form), then
// what was written.
func Report(s *Summary) []string {
	type line struct {
		hosts []string
		ranks string
	}
	var order []string
	byText := map[string]*line{}
	for _, n := range s.Nodes {
		var text string
		switch {
		case n.MissingDir:
			text = "no DEST (nothing loaded here)"
		case n.Error != "":
			text = "not harvested: " + n.Error
		default:
			what := "entries"
			if n.Entries == 1 {
				what = "entry"
			}
			text = fmt.Sprintf("compiled %d %s (%s) the bundle lacked", n.Entries, what, Size(n.Bytes))
			if n.Elsewhere > 0 {
				text += fmt.Sprintf("; %d also on other nodes", n.Elsewhere)
			}
		}
		if len(n.Skipped) > 0 {
			names := []string{}
			for _, sk := range n.Skipped {
				names = append(names, sk.Name+" ("+sk.Why+")")
			}
			text += "; skipped " + strings.Join(names, ", ")
		}
		l := byText[text]
		if l == nil {
			l = &line{}
			byText[text] = l
			order = append(order, text)
		}
		l.hosts = append(l.hosts, n.Host)
		l.ranks = fmt.Sprintf("rank %d", n.FirstRank)
		if n.LastRank > n.FirstRank {
			l.ranks = fmt.Sprintf("ranks %d-%d", n.FirstRank, n.LastRank)
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
