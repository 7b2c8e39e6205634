package cluster

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestAllOrNothing: when the load cannot complete on ONE node (kbn2, ranks
// 2-3) every rank of every node exits 1, no node has DEST afterwards (a
// pre-existing thing at DEST on kbn2 is left untouched), no temporary file
// or tree is left on any node or beside the bundle, and stderr says once
//
//	kbundle: kbn2 (ranks 2-3): REASON
//
// and names no other host. Under mpirun (Open MPI) and mpiexec.hydra (MPICH).
func TestAllOrNothing(t *testing.T) {
	c := needCluster(t)
	tree := makeTree(t, 2<<20) // 2.2 MiB packed, about the same extracted
	cases := []struct {
		name   string
		setup  func(t *testing.T, node, parent, dest string)
		reason *regexp.Regexp
		left   []string // what stays in kbn2's parent
		check  func(t *testing.T, node, dest string)
	}{
		{
			name: "storage-full",
			setup: func(t *testing.T, node, parent, _ string) {
				c.mustOn(t, node, "mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", parent)
			},
			reason: regexp.MustCompile(`(?i)no space left on device`),
		},
		{
			// Room for most of the extracted tree (2.2 MiB): fails late,
			// when the other nodes may have extracted theirs.
			name: "storage-full-late",
			setup: func(t *testing.T, node, parent, _ string) {
				c.mustOn(t, node, "mount", "-t", "tmpfs", "-o", "size=1800k,mode=0755", "tmpfs", parent)
			},
			reason: regexp.MustCompile(`(?i)no space left on device`),
		},
		{
			name: "dest-not-empty",
			setup: func(t *testing.T, node, _, dest string) {
				if err := os.MkdirAll(c.root(node, dest), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(c.root(node, filepath.Join(dest, "old")), []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			reason: regexp.MustCompile(`(?i)exists|not empty`),
			left:   []string{"dest"},
			check: func(t *testing.T, node, dest string) {
				ents, _ := os.ReadDir(c.root(node, dest))
				b, err := os.ReadFile(c.root(node, filepath.Join(dest, "old")))
				if len(ents) != 1 || err != nil || string(b) != "old" {
					t.Errorf("%s: the existing %s was changed: %d entries, old=%q (%v)", node, dest, len(ents), b, err)
				}
			},
		},
		{
			name: "parent-read-only",
			setup: func(t *testing.T, node, parent, _ string) {
				c.mustOn(t, node, "mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", parent)
				c.mustOn(t, node, "mount", "-o", "remount,ro", parent)
			},
			reason: regexp.MustCompile(`(?i)read-only file system`),
		},
		{
			name: "dest-is-a-file",
			setup: func(t *testing.T, node, _, dest string) {
				if err := os.WriteFile(c.root(node, dest), []byte("not a bundle\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			reason: regexp.MustCompile(`.`),
			left:   []string{"dest"},
			check: func(t *testing.T, node, dest string) {
				b, err := os.ReadFile(c.root(node, dest))
				if err != nil || string(b) != "not a bundle\n" {
					t.Errorf("%s: the existing file %s was changed: %q (%v)", node, dest, b, err)
				}
			},
		},
	}
	line := regexp.MustCompile(`(?m)^kbundle: (kbn\d+) \(ranks? ([0-9, -]+)\): (.*)$`)
	for _, l := range mpiLaunches {
		for _, tc := range cases {
			t.Run(l.name+"/"+tc.name, func(t *testing.T) {
				kb := c.kbundle(t, l.v)
				file := pack(t, kb, tree)
				parent := c.localDir(t)
				dest := filepath.Join(parent, "dest")
				bad := c.nodes[1]
				tc.setup(t, bad, parent, dest)
				w := newWrapper(t, false)
				r := c.job(t, l, nil, w.script, kb, "load", "--bundle", file, "--to", dest)
				w.wantExits(t, c, r, 1)
				if r.stdout != "" {
					t.Errorf("stdout %q on failure", r.stdout)
				}
				ms := line.FindAllStringSubmatch(r.stderr, -1)
				if len(ms) != 1 {
					t.Errorf("%d lines `kbundle: HOST (ranks R): REASON`, want exactly one, for %s\n%s", len(ms), bad, r)
				} else if m := ms[0]; m[1] != bad || m[2] != "2-3" || !tc.reason.MatchString(m[3]) {
					t.Errorf("failure line %q: want host %s, ranks 2-3, a reason matching %q\n%s", m[0], bad, tc.reason, r)
				}
				want := map[string][]string{bad: tc.left}
				c.wantOnly(t, parent, want)
				if tc.check != nil {
					tc.check(t, bad, dest)
				}
				if ents, _ := os.ReadDir(filepath.Dir(file)); len(ents) != 1 {
					var names []string
					for _, e := range ents {
						names = append(names, e.Name())
					}
					t.Errorf("beside the bundle on the shared file system: %q, want only %s", names, filepath.Base(file))
				}
				c.noStrays(t, kb, 10e9)
				if t.Failed() && !slices.Contains(strings.Split(r.stderr, "\n"), "") {
					t.Logf("%s", r)
				}
			})
		}
	}
}
