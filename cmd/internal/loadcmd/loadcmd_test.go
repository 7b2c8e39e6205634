package loadcmd

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/load"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestJobID: the scheduler's id first (in JobIDVars' order), else rank
// 0's process id on every rank.
func TestJobID(t *testing.T) {
	for _, c := range []struct {
		env  func(string) string
		want string
	}{
		{env("SLURM_JOB_ID", "7", "PBS_JOBID", "8"), "7"},
		{env("PBS_JOBID", "8", "PMIX_NAMESPACE", "ns"), "8"},
		{env("PMIX_NAMESPACE", "ns"), "ns"},
		{env(), "pid" + strconv.Itoa(os.Getpid())},
	} {
		ids := broadcasttest.OnEveryRank(broadcasttest.World(0, 0, 1), func(w *broadcasttest.Comm) string {
			id, err := JobID(w, c.env)
			if err != nil {
				t.Error(err)
			}
			return id
		})
		for rank, id := range ids {
			if id != c.want {
				t.Errorf("rank %d: %q, want %q", rank, id, c.want)
			}
		}
	}
}

func TestDest(t *testing.T) {
	tmp := t.TempDir()
	got, err := Dest("", env("TMPDIR", tmp), "42")
	if want := load.Dest(tmp, UserName(), "42"); err != nil || got != want {
		t.Errorf("default: %q %v, want %q", got, err, want)
	}
	got, err = Dest("rel", env("TMPDIR", tmp), "42")
	if err != nil || !filepath.IsAbs(got) || filepath.Base(got) != "rel" {
		t.Errorf("rel: %q %v, want it absolute", got, err)
	}
}

func TestKnobs(t *testing.T) {
	p, err := knobs(env("KBUNDLE_BCAST_CHUNK", "4096", "KBUNDLE_TEST_RANKS_PER_NODE", "2"))
	if err != nil || p.ChunkSize != 4096 || p.RanksPerNode != 2 || !p.BorrowNodeCPUs || p.HostInfo == nil {
		t.Errorf("%+v %v", p, err)
	}
	for _, e := range []func(string) string{
		env("KBUNDLE_BCAST_CHUNK", "0"),
		env("KBUNDLE_BCAST_CHUNK", strconv.FormatInt(broadcast.MaxChunkSize+1, 10)),
		env("KBUNDLE_TEST_RANKS_PER_NODE", "0"),
		env("KBUNDLE_TEST_RANKS_PER_NODE", "x"),
	} {
		if _, err := knobs(e); err == nil {
			t.Errorf("no error")
		}
	}
}

func TestReasons(t *testing.T) {
	if got := Reasons(errors.New("plain")); len(got) != 1 || got[0] != "plain" {
		t.Errorf("%q", got)
	}
	named := make([]string, load.MaxNamed)
	for i := range named {
		named[i] = "host" + strconv.Itoa(i)
	}
	got := Reasons(&broadcast.Error{Reasons: named, Ranks: load.MaxNamed + 3})
	if len(got) != load.MaxNamed+1 || !strings.Contains(got[len(got)-1], "and 3 more failing ranks") {
		t.Errorf("%q", got)
	}
}

// TestCLIDest: `kbundle load`'s DEST, as given (absolute) or the job's
// default; a control character, which would break "DEST alone on
// stdout's first line", is a usage error (it was cmd/kbundle's
// TestDefaultDest).
func TestCLIDest(t *testing.T) {
	for _, c := range []struct {
		to, job string
		want    string // suffix; "" means an error
	}{
		{"/x/dest", "1", "/x/dest"},
		{"/x/de\nst", "1", ""},
		{"/x/\x1b[2Jdest", "1", ""},
		{"", "42", "-42"},
		{"", "../../etc", "-_.._.._etc"},
	} {
		o, err := Resolve(Request{Bundle: "b", Dest: c.to, Environ: map[string]string{}}, CLI, 0)
		got := ""
		if err == nil {
			var p load.Plan
			p, err = o.Plan(c.job, true, false)
			got = p.Dest
		}
		switch {
		case c.want == "" && (err == nil || !errors.Is(err, ErrUsage)):
			t.Errorf("%q: %q %v, want a usage error", c.to, got, err)
		case c.want != "" && (err != nil || !strings.HasSuffix(got, c.want)):
			t.Errorf("%q %q: %q %v, want ...%s", c.to, c.job, got, err, c.want)
		}
	}
}
