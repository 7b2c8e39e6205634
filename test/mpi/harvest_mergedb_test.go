package mpi

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// kernDB is MIOpen's kernel cache, as it makes it (ROCm/MIOpen
// src/include/miopen/kern_db.hpp: KernelConfig::CreateQuery, and the
// INSERT of KernDb::StoreRecordUnsafe), with one kernel added per argument
// (NAME=BLOB); it prints the database's kernels, sorted, one a line.
const kernDB = `import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript("CREATE TABLE IF NOT EXISTS ` + "`kern_db` (`id` INTEGER PRIMARY KEY ASC,`kernel_name` TEXT NOT NULL,`kernel_args` TEXT NOT NULL,`kernel_blob` BLOB NOT NULL,`kernel_hash` TEXT NOT NULL,`uncompressed_size` INT NOT NULL);CREATE UNIQUE INDEX IF NOT EXISTS `idx_kern_db`" + ` ON kern_db(kernel_name, kernel_args);")
for a in sys.argv[2:]:
    n, b = a.split("=", 1)
    db.execute("INSERT OR REPLACE INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size) VALUES (?, ?, ?, ?, ?);", (n, " -mcpu=gfx942", b.encode(), "md5", 0))
db.commit()
for n, b in db.execute("SELECT kernel_name, kernel_blob FROM kern_db ORDER BY kernel_name"):
    print(n + "=" + b.decode())
`

// TestHarvestMergesMIOpenDB: under both MPIs, np 2 with fake nodes, each
// node adds a kernel to MIOpen's kernel cache, which the set holds with
// one; the harvest merges both nodes' copies (the issue 29 item 3), and
// the next load installs all three kernels on every node.
func TestHarvestMergesMIOpenDB(t *testing.T) {
	if err := exec.Command("python3", "-c", "import sqlite3").Run(); err != nil {
		t.Skip("no python3 with sqlite3")
	}
	kernels := func(path string, add ...string) []string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("python3", append([]string{"-c", kernDB, path}, add...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("python3: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	const db = "miopen/cache/gfx942_304.ukdb"
	env := []string{"KBUNDLE_TEST_RANKS_PER_NODE=1"}
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			tree := filepath.Join(t.TempDir(), "cache")
			kernels(filepath.Join(tree, db), "base.o=b0")
			set := packTree(t, tree)
			dir := t.TempDir()
			dest := filepath.Join(dir, "dest")
			if _, se, code := testutil.RunMPI(t, v, 2, env, kb, "load", "-q", "--bundle", set, "--to", dest); code != 0 {
				t.Fatalf("load: exit %d\n%s", code, se)
			}
			kernels(filepath.Join(dest+".node0", db), "a.o=from node 0")
			kernels(filepath.Join(dest+".node1", db), "b.o=from node 1")
			_, se, code := testutil.RunMPI(t, v, 2, env, kb, "harvest", "--bundle", set, "--to", dest)
			if code != 0 || !strings.Contains(se, "merged 2 copies of "+db+", record by record") || !strings.Contains(se, "3 records, 1 added") {
				t.Fatalf("harvest: exit %d, want the merge reported\n%s", code, se)
			}
			next := filepath.Join(dir, "next")
			if _, se, code := testutil.RunMPI(t, v, 2, env, kb, "load", "-q", "--bundle", set, "--to", next); code != 0 {
				t.Fatalf("the next load: exit %d\n%s", code, se)
			}
			want := []string{"a.o=from", "node", "0", "b.o=from", "node", "1", "base.o=b0"}
			for _, node := range []string{".node0", ".node1"} {
				if got := kernels(filepath.Join(next+node, db)); !slices.Equal(got, want) {
					t.Errorf("%s: kernels %q, want %q", node, got, want)
				}
			}
		})
	}
}
