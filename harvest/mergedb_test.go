package harvest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The databases of these tests are laid out as MIOpen writes them: the
// statements are MIOpen's (ROCm/MIOpen src/include/miopen/kern_db.hpp,
// KernelConfig::CreateQuery and KernDb's insert; src/sqlite_db.cpp, the
// perf_db table; src/include/miopen/sqlite_db.hpp, SQLiteSerializable's
// CreateQuery over conv::ProblemDescription's fields).
const (
	kernDBSchema = "CREATE TABLE IF NOT EXISTS `kern_db` (`id` INTEGER PRIMARY KEY ASC,`kernel_name` TEXT NOT NULL,`kernel_args` TEXT NOT NULL,`kernel_blob` BLOB NOT NULL,`kernel_hash` TEXT NOT NULL,`uncompressed_size` INT NOT NULL);CREATE UNIQUE INDEX IF NOT EXISTS `idx_kern_db` ON kern_db(kernel_name, kernel_args);"
	perfDBSchema = "CREATE TABLE IF NOT EXISTS `config` (`id` INTEGER PRIMARY KEY ASC,`layout` TEXT NOT NULL,`data_type` TEXT NOT NULL,`direction` TEXT NOT NULL,`spatial_dim` INT NOT NULL,`in_channels` INT NOT NULL,`in_h` INT NOT NULL,`in_w` INT NOT NULL,`in_d` INT NOT NULL,`fil_h` INT NOT NULL,`fil_w` INT NOT NULL,`fil_d` INT NOT NULL,`out_channels` INT NOT NULL,`batchsize` INT NOT NULL,`pad_h` INT NOT NULL,`pad_w` INT NOT NULL,`pad_d` INT NOT NULL,`conv_stride_h` INT NOT NULL,`conv_stride_w` INT NOT NULL,`conv_stride_d` INT NOT NULL,`dilation_h` INT NOT NULL,`dilation_w` INT NOT NULL,`dilation_d` INT NOT NULL,`bias` INT NOT NULL,`group_count` INT NOT NULL);CREATE UNIQUE INDEX IF NOT EXISTS `idx_config` ON config( layout,data_type,direction, spatial_dim,in_channels,in_h,in_w,in_d,fil_h,fil_w,fil_d,out_channels,batchsize,pad_h,pad_w,pad_d,conv_stride_h,conv_stride_w,conv_stride_d,dilation_h,dilation_w,dilation_d,bias,group_count );" +
		"CREATE TABLE  IF NOT EXISTS `perf_db` (`id` INTEGER PRIMARY KEY ASC,`solver` TEXT NOT NULL,`config` INTEGER NOT NULL,`params` TEXT NOT NULL);CREATE UNIQUE INDEX IF NOT EXISTS `idx_perf_db` ON perf_db(solver, config);"
	ukdb = "miopen/cache/gfx942_304.ukdb"
	udb  = "miopen/db/gfx942_304_1.1.0.udb"
)

// sqlitePy runs a Python snippet with sqlite3 imported and db the
// connection to path (made with the schemas): its stdout.
func sqlitePy(t *testing.T, path, code string) string {
	t.Helper()
	if err := exec.Command("python3", "-c", "import sqlite3").Run(); err != nil {
		t.Skip("no python3 with sqlite3")
	}
	os.MkdirAll(filepath.Dir(path), 0o755)
	script := "import sqlite3, sys, json\ndb = sqlite3.connect(sys.argv[1])\ndb.executescript(sys.argv[2])\n" + code + "\ndb.commit()\ndb.close()\n"
	schema := perfDBSchema
	if strings.HasSuffix(path, ".ukdb") {
		schema = kernDBSchema
	}
	out, err := exec.Command("python3", "-c", script, path, schema).CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v: %s", err, out)
	}
	return string(out)
}

// addKernel inserts a kernel as KernDb::StoreRecordUnsafe does.
func addKernel(t *testing.T, path, name, blob string) {
	t.Helper()
	sqlitePy(t, path, `db.execute("INSERT OR REPLACE INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size) VALUES (?, ?, ?, ?, ?);", (`+pyStr(name)+`, " -mcpu=gfx942", `+pyStr(blob)+`.encode(), "md5", 0))`)
}

// addPerf inserts a tuning result as SQLitePerfDb::UpdateUnsafe does: the
// configuration (channels c), then the solver's row naming its id.
func addPerf(t *testing.T, path string, c int, solver, params string) {
	t.Helper()
	cfg := "('NCHW','FP32','F',2," + itoa(c) + ",28,28,1,3,3,1,64,16,1,1,0,1,1,1,1,1,1,0,1)"
	sqlitePy(t, path, `db.execute("INSERT OR IGNORE INTO config (layout,data_type,direction,spatial_dim,in_channels,in_h,in_w,in_d,fil_h,fil_w,fil_d,out_channels,batchsize,pad_h,pad_w,pad_d,conv_stride_h,conv_stride_w,conv_stride_d,dilation_h,dilation_w,dilation_d,bias,group_count) VALUES `+cfg+`;")
db.execute("INSERT OR REPLACE INTO perf_db(config, solver, params) VALUES ((SELECT id FROM config WHERE in_channels = ?), ?, ?);", (`+itoa(c)+`, `+pyStr(solver)+`, `+pyStr(params)+`))`)
}

func itoa(n int) string     { b, _ := json.Marshal(n); return string(b) }
func pyStr(s string) string { b, _ := json.Marshal(s); return string(b) }

// kernels lists the kernel database's records, "name=blob", sorted.
func kernels(t *testing.T, path string) []string {
	out := sqlitePy(t, path, `print(json.dumps(sorted(n + "=" + b.decode() for n, b in db.execute("SELECT kernel_name, kernel_blob FROM kern_db"))))`)
	var l []string
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return l
}

// perfs lists the perf-db's records, "channels/solver=params", sorted:
// each through its configuration's id.
func perfs(t *testing.T, path string) []string {
	out := sqlitePy(t, path, `print(json.dumps(sorted("%d/%s=%s" % r for r in db.execute("SELECT c.in_channels, p.solver, p.params FROM perf_db p JOIN config c ON p.config = c.id"))))`)
	var l []string
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return l
}

// mergeSetup installs a set holding MIOpen's two databases (one kernel,
// one tuning result) on two nodes: their DESTs.
func mergeSetup(t *testing.T) (set, dest string, nodes [2]string) {
	dir := t.TempDir()
	set, dest = filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	k, p := filepath.Join(dir, "seed.ukdb"), filepath.Join(dir, "seed.udb")
	addKernel(t, k, "base.o", "b0")
	addPerf(t, p, 1, "ConvDirect", "p1")
	kb, _ := os.ReadFile(k)
	pb, _ := os.ReadFile(p)
	install(t, set, dest, 2, map[string]string{ukdb: string(kb), udb: string(pb), "miopen/cache/other": "x"})
	return set, dest, [2]string{dest + ".node0", dest + ".node1"}
}

// layerFile writes name of the layer to a file of its own: its path.
func layerFile(t *testing.T, layer, name string) string {
	p := filepath.Join(t.TempDir(), filepath.Base(name))
	if err := os.WriteFile(p, []byte(layerFiles(t, layer)[name]), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Two nodes each add kernels and tuning results to the same databases
// (their new rows get the same ids); after the harvest the set holds
// both nodes' records, the perf-db's references mapped to their
// configurations.
func TestMergeDBBothNodes(t *testing.T) {
	set, dest, n := mergeSetup(t)
	addKernel(t, filepath.Join(n[0], ukdb), "a.o", "a")
	addKernel(t, filepath.Join(n[1], ukdb), "b.o", "b")
	addKernel(t, filepath.Join(n[1], ukdb), "c.o", "c")
	addPerf(t, filepath.Join(n[0], udb), 8, "ConvAsm", "p8")
	addPerf(t, filepath.Join(n[1], udb), 16, "ConvWino", "p16")
	addPerf(t, filepath.Join(n[1], udb), 1, "ConvWino", "p1w") // the set's configuration, a new solver
	s := run(t, set, dest, 2, 1)[0]
	if s.Layer == "" {
		t.Fatalf("no layer: %+v", s)
	}
	if got, want := kernels(t, layerFile(t, s.Layer, ukdb)), []string{"a.o=a", "b.o=b", "base.o=b0", "c.o=c"}; !slices.Equal(got, want) {
		t.Errorf("kernels %q, want %q", got, want)
	}
	if got, want := perfs(t, layerFile(t, s.Layer, udb)), []string{"1/ConvDirect=p1", "1/ConvWino=p1w", "16/ConvWino=p16", "8/ConvAsm=p8"}; !slices.Equal(got, want) {
		t.Errorf("perf-db %q, want %q", got, want)
	}
	if len(s.Merged) != 2 {
		t.Fatalf("merged %+v", s.Merged)
	}
	for _, d := range s.Merged {
		if d.Fallback != "" || len(d.LeftOut) > 0 || d.Conflicts != 0 || len(d.From) != 2 {
			t.Errorf("%+v", d)
		}
	}
	if d := s.Merged[0]; d.Name != ukdb || d.Records != 4 || d.Added != 2 {
		t.Errorf("%+v", d)
	}
	if d := s.Merged[1]; d.Name != udb || d.Added != 3 { // 1 configuration, 2 results
		t.Errorf("%+v", d)
	}
	if s.Nodes[0].Chosen != 2 || s.Nodes[1].Chosen != 2 || s.Files != 2 || s.Units != 2 {
		t.Errorf("chosen %d, %d; files %d, units %d", s.Nodes[0].Chosen, s.Nodes[1].Chosen, s.Files, s.Units)
	}
	// The next job, loaded from the set, has every record.
	installed(t, set, dest+".next", 1)
	if got := kernels(t, filepath.Join(dest+".next.node0", ukdb)); len(got) != 4 {
		t.Errorf("the next load's kernels %q", got)
	}
}

// Only the second node compiled: its copy goes as it is, no merge.
func TestMergeDBOneNodeChanged(t *testing.T) {
	set, dest, n := mergeSetup(t)
	addKernel(t, filepath.Join(n[1], ukdb), "b.o", "b")
	s := run(t, set, dest, 2, 1)[0]
	if len(s.Merged) != 0 || s.Nodes[1].Chosen != 1 || s.Files != 1 {
		t.Fatalf("merged %+v, chosen %d, files %d", s.Merged, s.Nodes[1].Chosen, s.Files)
	}
	if got := kernels(t, layerFile(t, s.Layer, ukdb)); !slices.Equal(got, []string{"b.o=b", "base.o=b0"}) {
		t.Errorf("kernels %q", got)
	}
}

// Both nodes compile one kernel (same name and arguments) to different
// bytes: the lowest rank's record wins, and the conflict is counted.
func TestMergeDBConflict(t *testing.T) {
	set, dest, n := mergeSetup(t)
	addKernel(t, filepath.Join(n[0], ukdb), "k.o", "from node 0")
	addKernel(t, filepath.Join(n[1], ukdb), "k.o", "from node 1")
	addKernel(t, filepath.Join(n[1], ukdb), "b.o", "b")
	s := run(t, set, dest, 2, 1)[0]
	if got, want := kernels(t, layerFile(t, s.Layer, ukdb)), []string{"b.o=b", "base.o=b0", "k.o=from node 0"}; !slices.Equal(got, want) {
		t.Errorf("kernels %q, want %q", got, want)
	}
	if len(s.Merged) != 1 || s.Merged[0].Conflicts != 1 || s.Merged[0].Added != 1 {
		t.Errorf("%+v", s.Merged)
	}
}

// A node's copy that is not a valid SQLite database is left out, loudly;
// the others are merged and the harvest succeeds. With every copy but
// one damaged, the layer holds that one.
func TestMergeDBCorruptCopy(t *testing.T) {
	set, dest, n := mergeSetup(t)
	addKernel(t, filepath.Join(n[0], ukdb), "a.o", "a")
	write(t, n[1], ukdb, strings.Repeat("not a database ", 300))
	s := run(t, set, dest, 2, 1)[0]
	if s.Layer == "" || len(s.Merged) != 1 {
		t.Fatalf("layer %q, merged %+v", s.Layer, s.Merged)
	}
	d := s.Merged[0]
	if len(d.LeftOut) != 1 || !strings.HasPrefix(d.LeftOut[0], "kbn1 (rank 1): ") || !strings.Contains(d.LeftOut[0], "not a valid SQLite database") || d.Fallback != "" {
		t.Errorf("%+v", d)
	}
	if got := kernels(t, layerFile(t, s.Layer, ukdb)); !slices.Equal(got, []string{"a.o=a", "base.o=b0"}) {
		t.Errorf("kernels %q", got)
	}

	// A copy with other tables (another MIOpen version), or a trigger,
	// is left out too.
	set, dest, n = mergeSetup(t)
	addKernel(t, filepath.Join(n[0], ukdb), "a.o", "a")
	sqlitePy(t, filepath.Join(n[1], ukdb), `db.execute("CREATE TABLE extra (x)")`)
	sqlitePy(t, filepath.Join(n[0], udb), `db.execute("CREATE TRIGGER t AFTER INSERT ON config BEGIN DELETE FROM perf_db; END")`)
	addPerf(t, filepath.Join(n[1], udb), 8, "ConvAsm", "p8")
	s = run(t, set, dest, 2, 1)[0]
	if len(s.Merged) != 2 || len(s.Merged[0].LeftOut) != 1 || !strings.Contains(s.Merged[0].LeftOut[0], "its tables are not those") ||
		len(s.Merged[1].LeftOut) != 1 || !strings.HasPrefix(s.Merged[1].LeftOut[0], "kbn0 (rank 0): it has triggers") {
		t.Fatalf("%+v", s.Merged)
	}
	if got := perfs(t, layerFile(t, s.Layer, udb)); !slices.Equal(got, []string{"1/ConvDirect=p1", "8/ConvAsm=p8"}) {
		t.Errorf("perf-db %q", got)
	}

	// Every copy damaged: the lowest rank's goes, and the report says so.
	set, dest, n = mergeSetup(t)
	write(t, n[0], ukdb, "garbage 0")
	write(t, n[1], ukdb, "garbage 1")
	s = run(t, set, dest, 2, 1)[0]
	if s.Layer == "" || len(s.Merged) != 1 || s.Merged[0].Fallback == "" || s.Merged[0].FallbackFrom != "kbn0 (rank 0)" || len(s.Merged[0].LeftOut) != 2 {
		t.Fatalf("layer %q, merged %+v", s.Layer, s.Merged)
	}
	if got := layerFiles(t, s.Layer)[ukdb]; got != "garbage 0" {
		t.Errorf("the layer's copy %q", got)
	}
}

// Without Python the harvest still succeeds: the lowest rank's copy goes,
// and the report says why.
func TestMergeDBNoPython(t *testing.T) {
	set, dest, n := mergeSetup(t)
	addKernel(t, filepath.Join(n[0], ukdb), "a.o", "a")
	addKernel(t, filepath.Join(n[1], ukdb), "b.o", "b")
	sums, errs := runEach(set, dest, 2, 1, func(p *Plan) { p.Python = filepath.Join(t.TempDir(), "no-python") })
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	s := sums[0]
	if len(s.Merged) != 1 || !strings.Contains(s.Merged[0].Fallback, "no Python") || s.Merged[0].FallbackFrom != "kbn0 (rank 0)" {
		t.Fatalf("%+v", s.Merged)
	}
	if got := kernels(t, layerFile(t, s.Layer, ukdb)); !slices.Equal(got, []string{"a.o=a", "base.o=b0"}) {
		t.Errorf("kernels %q", got)
	}
}

// The text find-db (ROCm/MIOpen src/db.cpp, PlainTextDb: KEY=ID:VALUES;…
// lines, IDs sorted, src/db_record.cpp) merges by KEY and ID.
const ufdb = "miopen/db/gfx942_304.HIP.6_2_0.ufdb.txt"

func TestMergeDBTextFindDB(t *testing.T) {
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	k1 := "3-32-32-3x3-64-32-32-16-1x1-1x1-1x1-0-NCHW-FP32-F"
	k2 := "64-56-56-1x1-64-56-56-16-0x0-1x1-1x1-0-NCHW-FP32-F"
	k3 := "128-28-28-3x3-128-28-28-16-1x1-1x1-1x1-0-NCHW-FP16-B"
	install(t, set, dest, 2, map[string]string{ufdb: k1 + "=ConvOclDirectFwd:0.05,0,miopenConvolutionFwdAlgoDirect,<unused>\n"})
	write(t, dest+".node0", ufdb, k1+"=ConvBinWinograd3x3U:0.03,0,miopenConvolutionFwdAlgoWinograd,<unused>;ConvOclDirectFwd:0.05,0,miopenConvolutionFwdAlgoDirect,<unused>\n"+
		k2+"=ConvOclDirectFwd1x1:0.02,0,miopenConvolutionFwdAlgoDirect,<unused>\n")
	write(t, dest+".node1", ufdb, k1+"=ConvOclDirectFwd:0.05,0,miopenConvolutionFwdAlgoDirect,<unused>\n"+
		k2+"=ConvOclDirectFwd1x1:0.09,0,miopenConvolutionFwdAlgoDirect,<unused>\n"+ // a conflict: node 0's kept
		k3+"=GemmBwdRest:0.7,4096,miopenConvolutionBwdDataAlgoGEMM,<unused>\n"+
		"ill-formed line\n")
	s := run(t, set, dest, 2, 1)[0]
	want := k1 + "=ConvBinWinograd3x3U:0.03,0,miopenConvolutionFwdAlgoWinograd,<unused>;ConvOclDirectFwd:0.05,0,miopenConvolutionFwdAlgoDirect,<unused>\n" +
		k2 + "=ConvOclDirectFwd1x1:0.02,0,miopenConvolutionFwdAlgoDirect,<unused>\n" +
		k3 + "=GemmBwdRest:0.7,4096,miopenConvolutionBwdDataAlgoGEMM,<unused>\n"
	if got := layerFiles(t, s.Layer)[ufdb]; got != want {
		t.Errorf("the layer's find-db\n%s\nwant\n%s", got, want)
	}
	if len(s.Merged) != 1 || s.Merged[0].Records != 4 || s.Merged[0].Added != 1 || s.Merged[0].Conflicts != 1 || len(s.Merged[0].LeftOut) != 0 {
		t.Errorf("%+v", s.Merged)
	}
}

// mergeLines: a binary copy is left out; MIOpen's duplicate IDs in one
// record keep the first (DbRecord::ParseContents).
func TestMergeLines(t *testing.T) {
	dir := t.TempDir()
	in := []string{filepath.Join(dir, "0"), filepath.Join(dir, "1"), filepath.Join(dir, "2")}
	os.WriteFile(in[0], []byte("bin\x00ary=a:1\n"), 0o644)
	os.WriteFile(in[1], []byte("k=b:2;b:3;:x;noid\r\n=nokey\n"), 0o644)
	os.WriteFile(in[2], []byte("k=a:1;b:4\nj=c:5"), 0o644)
	out := filepath.Join(dir, "out")
	res, err := mergeLines(out, in)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if string(b) != "k=a:1;b:2\nj=c:5\n" || res.Base != 1 || res.Records != 3 || res.Added != 2 || res.Conflicts != 1 || len(res.LeftOut) != 1 || res.LeftOut[0].Copy != 0 {
		t.Errorf("%q, %+v", b, res)
	}
}

// FuzzMergeLines: any two copies merge without a panic into lines that
// merge again to themselves, every record of the lowest rank's kept.
func FuzzMergeLines(f *testing.F) {
	f.Add("k=a:1;b:2\n", "k=b:3;c:4\nj=d:5")
	f.Add("=x\n\x00", "k=:;:\r\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		dir := t.TempDir()
		in := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
		os.WriteFile(in[0], []byte(a), 0o644)
		os.WriteFile(in[1], []byte(b), 0o644)
		out := filepath.Join(dir, "out")
		res, err := mergeLines(out, in)
		if err != nil {
			if res.Base >= 0 {
				t.Fatalf("%v with a copy read", err)
			}
			return
		}
		first, _ := os.ReadFile(out)
		again, err := mergeLines(filepath.Join(dir, "again"), []string{out})
		second, _ := os.ReadFile(filepath.Join(dir, "again"))
		if err != nil || string(first) != string(second) || again.Records != res.Records {
			t.Fatalf("merged %q, again %q (%v)", first, second, err)
		}
	})
}
