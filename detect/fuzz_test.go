package detect

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/launcher"
)

// fuzzEnv builds an environment from text ("KEY=VALUE" lines) plus, for
// each byte of picks, a launcher variable chosen by that byte with the
// next comma-separated field of vals as its value, so the fuzzer reaches
// launcher variables quickly.
func fuzzEnv(text string, picks []byte, vals string) map[string]string {
	env := map[string]string{}
	for line := range strings.Lines(text) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		env[k] = v
	}
	names := append(launcher.Names(), ModeEnv, "SLURM_JOB_ID", "PBS_JOBID", "FLUX_URI")
	fields := strings.Split(vals, ",")
	for i, b := range picks {
		env[names[int(b)%len(names)]] = fields[i%len(fields)]
	}
	return env
}

func FuzzDetect(f *testing.F) {
	for _, dir := range []string{"launchers", "cases"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*", "*.env"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(string(b), []byte(nil), "")
		}
	}
	f.Add("", []byte{0, 1, 2, 3}, "0,4,1,2")
	f.Add("SLURM_STEP_ID=0\nSLURM_STEP_NUM_TASKS=4\nSLURM_PROCID=3\n", []byte{9, 10}, "2(x2),1")
	f.Add("KBUNDLE_MODE=read\n", []byte{200, 201}, "-1,4294967291")

	f.Fuzz(func(t *testing.T, text string, picks []byte, vals string) {
		env := fuzzEnv(text, picks, vals)
		r, err := Detect(mapLookup(env))
		r2, err2 := Detect(mapLookup(env))
		delete(env, ModeEnv)
		if r3, err3 := Detect(mapLookup(env)); r3 != r || (err3 == nil) != (err == nil) {
			t.Fatalf("KBUNDLE_MODE changed the launcher facts: %+v, %v without it, %+v, %v with it", r3, err3, r, err)
		}
		if r != r2 || (err == nil) != (err2 == nil) {
			t.Fatalf("Detect is not deterministic: %+v, %v then %+v, %v", r, err, r2, err2)
		}
		if err != nil {
			if !errors.Is(err, ErrInconsistent) {
				t.Fatalf("error is not ErrInconsistent: %v", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q is not one line", err)
			}
		} else {
			checkInvariants(t, r)
		}

		// Without launcher variables nothing is a task.
		scrubbed := map[string]string{}
		for k, v := range env {
			if len(launcher.Scrub([]string{k + "=" + v})) == 1 {
				scrubbed[k] = v
			}
		}
		rs, err := Detect(mapLookup(scrubbed))
		if err != nil {
			t.Fatalf("scrubbed environment: %v", err)
		}
		if rs.Launcher != launcher.None || rs.MPI {
			t.Fatalf("scrubbed environment still detects %s (mpi=%v): %s", rs.Launcher, rs.MPI, rs.Reason)
		}
	})
}

func checkInvariants(t *testing.T, r Result) {
	t.Helper()
	if r.MPI {
		if r.Rank < 0 || (r.Size != Unknown && (r.Size < 2 || r.Rank >= r.Size)) {
			t.Fatalf("MPI with rank %d of %d", r.Rank, r.Size)
		}
		if r.Launcher == launcher.None {
			t.Fatal("MPI without a launcher")
		}
	} else if r.Rank != 0 || r.Size != 1 {
		t.Fatalf("not MPI but rank %d of %d", r.Rank, r.Size)
	}
	if r.LocalSize != Unknown && r.LocalSize < 1 {
		t.Fatalf("local size %d", r.LocalSize)
	}
	if r.LocalRank != Unknown && r.LocalRank < 0 {
		t.Fatalf("local rank %d", r.LocalRank)
	}
	if r.LocalRank != Unknown && r.LocalSize != Unknown && r.LocalRank >= r.LocalSize {
		t.Fatalf("local rank %d of %d", r.LocalRank, r.LocalSize)
	}
	if r.LocalSize != Unknown && r.Size != Unknown && r.LocalSize > r.Size {
		t.Fatalf("local size %d above size %d", r.LocalSize, r.Size)
	}
	if r.Node != Unknown && r.Node < 0 {
		t.Fatalf("node %d", r.Node)
	}
	if r.Reason == "" || strings.Contains(r.Reason, "\n") {
		t.Fatalf("reason %q is not one line", r.Reason)
	}
}
