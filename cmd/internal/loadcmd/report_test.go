package loadcmd

import (
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	. "github.com/kbundle/kbundle/harvest"
)

// TestReportEscapesNames is X8 of the 2026-12-01b review: harvest's
// report printed the names it skipped (from DEST), the units pruning
// dropped (from the set) and errors naming them as they are, so a name
// holding terminal control sequences reached the terminal. Every line
// must be printable (bundle.Printable's quoting).
func TestReportEscapesNames(t *testing.T) {
	evil := "a\x1b]0;TITLE\x07\x1b[2J\x1b[31mRED"
	s := &Summary{
		Nodes: []NodeReport{
			{Host: "n0", Entries: 1, Bytes: 3, Skipped: []Skip{{Name: evil, Why: "symlink"}, {Name: "ok", Why: "unreadable: open " + evil + ": permission denied"}}},
			{Host: "n1", FirstRank: 1, LastRank: 1, Error: "cannot read " + evil},
		},
		MaxSize: 10, SetBytes: 20, PruneNote: "not pruned: " + evil,
	}
	lines := nodeLines(CLI, s)
	lines = append(lines, pruneReport(CLI, s)...)
	s.PruneNote = ""
	s.Prune = &bundle.Prune{Limit: 10, Target: 9, Before: 20, After: 5, Dropped: []bundle.Unit{{Name: evil, Bytes: 15, LastUse: time.Unix(1, 0)}}, DroppedBytes: 15}
	lines = append(lines, pruneReport(CLI, s)...)
	joined := strings.Join(lines, "\n")
	if strings.ContainsAny(joined, "\x1b\x07") {
		t.Fatalf("a report line holds a control character:\n%q", joined)
	}
	for _, want := range []string{`"a\x1b]0;TITLE\a\x1b[2J\x1b[31mRED" (symlink)`, `dropped "a\x1b]0;TITLE`} {
		if !strings.Contains(joined, want) {
			t.Errorf("the report does not name %s:\n%s", want, joined)
		}
	}
}
