// Package hostlist writes host names as Slurm writes them, identical
// lines merged: kbn[1-998]. Harvest's report and load's per-node
// warnings use it.
package hostlist

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var hostRe = regexp.MustCompile(`^(.*?)([0-9]+)$`)

// Format writes host names in Slurm's hostlist form: kbn1, kbn2, kbn3,
// kbn7 → kbn[1-3,7].
func Format(hosts []string) string {
	type num struct {
		n     int
		s     string
		width int
	}
	prefixes := []string{}
	nums := map[string][]num{}
	var plain []string
	for _, h := range hosts {
		m := hostRe.FindStringSubmatch(h)
		if m == nil {
			plain = append(plain, h)
			continue
		}
		n, _ := strconv.Atoi(m[2])
		if _, ok := nums[m[1]]; !ok {
			prefixes = append(prefixes, m[1])
		}
		nums[m[1]] = append(nums[m[1]], num{n, m[2], len(m[2])})
	}
	out := plain
	for _, p := range prefixes {
		ns := nums[p]
		slices.SortFunc(ns, func(a, b num) int { return a.n - b.n })
		if len(ns) == 1 {
			out = append(out, p+ns[0].s)
			continue
		}
		var parts []string
		for i := 0; i < len(ns); {
			j := i
			for j+1 < len(ns) && ns[j+1].n == ns[j].n+1 && ns[j+1].width == ns[i].width {
				j++
			}
			if j > i {
				parts = append(parts, ns[i].s+"-"+ns[j].s)
			} else {
				parts = append(parts, ns[i].s)
			}
			i = j + 1
		}
		out = append(out, p+"["+strings.Join(parts, ",")+"]")
	}
	return strings.Join(out, ",")
}

// A Row is one node's line of a report before merging: its host, its
// first and last rank, and the text.
type Row struct {
	Host        string
	First, Last int
	Text        string
}

// Lines makes rows lines, in order of first appearance: the nodes of one
// text on one line, named in hostlist form ("kbn[1-3]: text"), or one
// node by its host and ranks ("kbn1 (ranks 0-1): text").
func Lines(rows []Row) []string {
	type line struct {
		hosts []string
		ranks string
	}
	var order []string
	byText := map[string]*line{}
	for _, r := range rows {
		l := byText[r.Text]
		if l == nil {
			l = &line{}
			byText[r.Text] = l
			order = append(order, r.Text)
		}
		l.hosts = append(l.hosts, r.Host)
		l.ranks = fmt.Sprintf("rank %d", r.First)
		if r.Last > r.First {
			l.ranks = fmt.Sprintf("ranks %d-%d", r.First, r.Last)
		}
	}
	var out []string
	for _, text := range order {
		l := byText[text]
		who := l.hosts[0] + " (" + l.ranks + ")"
		if len(l.hosts) > 1 {
			who = Format(l.hosts)
		}
		out = append(out, who+": "+text)
	}
	return out
}
