package loadcmd

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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

// TestAgreeStart: the job id is the scheduler's (in JobIDVars' order),
// else rank 0's process id, on every rank and for both fronts, in one
// collective; Python's ranks also agree on one rank's bad request in
// it, the CLI's keep their own.
func TestAgreeStart(t *testing.T) {
	bad := errors.New("bad request on rank 1")
	for _, c := range []struct {
		env  func(string) string
		want string
	}{
		{env("SLURM_JOB_ID", "7", "PBS_JOBID", "8"), "7"},
		{env("PBS_JOBID", "8", "PMIX_NAMESPACE", "ns"), "8"},
		{env("PMIX_NAMESPACE", "ns"), "ns"},
		{env(), "pid101"}, // the first getpid's: rank 0 calls it, alone
	} {
		for _, f := range []Front{CLI, Python} {
			for _, fail := range []bool{false, true} {
				world := broadcasttest.World(0, 0, 1)
				var pids atomic.Int32
				getpid = func() int { return 100 + int(pids.Add(1)) }
				defer func() { getpid = os.Getpid }()
				var calls atomic.Int32
				for _, w := range world {
					w.Trace = func(string, int) { calls.Add(1) }
				}
				type out struct {
					job   string
					local error
				}
				outs := broadcasttest.OnEveryRank(world, func(w *broadcasttest.Comm) out {
					var local error
					if fail && w.Rank() == 1 {
						local = bad
					}
					var o out
					var err error
					o.local, err = agreeStart(w, f, c.env, local, func(job string, p broadcast.Placement) error { o.job = job; return nil })
					if err != nil {
						t.Error(err)
					}
					return o
				})
				for rank, o := range outs {
					if o.job != c.want {
						t.Errorf("%v: rank %d: %q, want %q", f, rank, o.job, c.want)
					}
					if want := fail && (f == Python || rank == 1); (o.local != nil) != want || want && !strings.Contains(o.local.Error(), bad.Error()) {
						t.Errorf("%v, rank 1 failing %v: rank %d: %v", f, fail, rank, o.local)
					}
				}
				if n := int(calls.Load()) / len(world); !fail && n != 1 {
					t.Errorf("%v: %d collectives a rank, want 1", f, n)
				}
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

// TestAgreeStartPlacement: the placement the load's split of the nodes
// would ask is agreed in agreeStart's one all-reduce, for both fronts:
// every rank alone on its node, as its launcher says, or not.
func TestAgreeStartPlacement(t *testing.T) {
	for _, c := range []struct {
		hosts []int
		want  broadcast.Placement
	}{
		{[]int{0, 1, 2}, broadcast.AllAlone},
		{[]int{0, 0, 1}, broadcast.NotAllAlone},
		{[]int{0}, broadcast.AllAlone},
	} {
		for _, f := range []Front{CLI, Python} {
			got := broadcasttest.OnEveryRank(broadcasttest.World(c.hosts...), func(w *broadcasttest.Comm) broadcast.Placement {
				var placed broadcast.Placement
				if _, err := agreeStart(broadcasttest.Placed(w, w.OnNode()), f, env(), nil, func(_ string, p broadcast.Placement) error {
					placed = p
					return nil
				}); err != nil {
					t.Error(err)
				}
				return placed
			})
			for r, p := range got {
				if p != c.want {
					t.Errorf("%v, hosts %v: rank %d: placement %v, want %v", f, c.hosts, r, p, c.want)
				}
			}
		}
	}
}
