package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/mpi"
)

// testBundle packs a small cache (with a Triton group file) into a
// private directory, recording the preset "triton".
func testBundle(t *testing.T) (tree, file string) {
	t.Helper()
	tree = filepath.Join(t.TempDir(), "cache")
	files := map[string]string{
		"triton/abc/kernel.cubin": strings.Repeat("cubin", 1000),
		"numba/mod.nbi":           "index",
		"top.txt":                 "top",
	}
	for name, body := range files {
		p := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(store, "cache.kbundle")
	if _, err := bundle.Pack(context.Background(), tree, file, &bundle.PackOptions{Preset: "triton"}); err != nil {
		t.Fatal(err)
	}
	return tree, file
}

// runAll runs one request on every rank of a fake world of the given
// nodes; req(rank) gives each rank's request.
func runAll(t *testing.T, nodes []int, req func(rank int) loadcmd.Request) []loadcmd.Outcome {
	t.Helper()
	world := broadcasttest.World(nodes...)
	return broadcasttest.OnEveryRank(world, func(c *broadcasttest.Comm) loadcmd.Outcome {
		opts, local := loadcmd.Resolve(req(c.Rank()), loadcmd.Python, c.Rank())
		return run(context.Background(), c, opts, local)
	})
}

func same(t *testing.T, rs []loadcmd.Outcome) {
	t.Helper()
	for i := range rs {
		a, b := rs[0], rs[i]
		a.Leader, b.Leader, a.HeldBytes, b.HeldBytes, a.MismatchKeys, b.MismatchKeys = false, false, 0, 0, nil, nil
		a.Dest, b.Dest = "", "" // node-local
		if a.OK != b.OK || a.Kind != b.Kind || a.Reason != b.Reason || a.Hint != b.Hint || a.Entries != b.Entries ||
			a.Nodes != b.Nodes || strings.Join(a.Presets, ",") != strings.Join(b.Presets, ",") {
			t.Errorf("rank %d's result differs from rank 0's:\n%+v\n%+v", i, rs[i], rs[0])
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestRun(t *testing.T) {
	_, file := testBundle(t)
	base := t.TempDir()
	cases := []struct {
		name    string
		nodes   []int
		req     func(dest string) loadcmd.Request
		ok      bool
		kind    loadcmd.Kind
		reason  string // regexp
		hint    string // substring
		presets string
		// destNodes > 0: dest is suffixed .node<k> by load (fake nodes);
		// < 0: the test gives each node of -destNodes ranks its own.
		destNodes int
		empty     string // rank 0's EmptyPresets
	}{
		{name: "one node recorded preset", nodes: []int{0, 0, 0},
			req: func(d string) loadcmd.Request { return loadcmd.Request{Bundle: file, Dest: d} }, ok: true, presets: "triton"},
		{name: "two nodes no preset", nodes: []int{0, 0, 1, 1},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Bundle: file, Dest: d, Presets: ptr([]string{}), ReplacePresets: true}
			}, ok: true,
			destNodes: -2},
		{name: "cache dir from the environment", nodes: []int{0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Dest: d, Environ: map[string]string{"KBUNDLE_CACHE_DIR": filepath.Dir(file)}}
			}, ok: true, presets: "triton"},
		{name: "fake nodes", nodes: []int{0, 0, 0, 0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Bundle: file, Dest: d, Environ: map[string]string{"KBUNDLE_TEST_RANKS_PER_NODE": "2"}}
			}, ok: true, presets: "triton", destNodes: 2},
		{name: "missing", nodes: []int{0, 0},
			req:  func(d string) loadcmd.Request { return loadcmd.Request{Bundle: file + ".nope", Dest: d} },
			kind: loadcmd.Unusable, reason: `cache\.kbundle\.nope`, hint: "kbundle warm --pack"},
		{name: "no bundle configured", nodes: []int{0, 1},
			req:  func(d string) loadcmd.Request { return loadcmd.Request{Dest: d} },
			kind: loadcmd.Unusable, reason: `no bundle given: pass bundle=FILE or set KBUNDLE_CACHE_DIR`},
		{name: "unknown preset", nodes: []int{0, 0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Bundle: file, Dest: d, Presets: ptr([]string{"triton,nosuch"})}
			},
			kind: loadcmd.Usage, reason: `nosuch`},
		{name: "preset from the environment", nodes: []int{0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Bundle: file, Dest: d, Environ: map[string]string{"KBUNDLE_PRESET": "numba triton"}}
			}, ok: true, presets: "triton,numba"},
		{name: "named preset with nothing in the bundle", nodes: []int{0, 0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Bundle: file, Dest: d, Presets: ptr([]string{"jax"})}
			},
			ok: true, presets: "triton,jax", empty: "jax"},
		{name: "bad jobs variable", nodes: []int{0, 0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Bundle: file, Dest: d, Environ: map[string]string{"KBUNDLE_JOBS": "many"}}
			},
			kind: loadcmd.Usage, reason: `KBUNDLE_JOBS="many"`},
		{name: "negative jobs", nodes: []int{0},
			req:  func(d string) loadcmd.Request { return loadcmd.Request{Bundle: file, Dest: d, Jobs: ptr(-2)} },
			kind: loadcmd.Usage, reason: `jobs=-2`},
		// Drifts of the 2026-12-01 design review: jobs is bounded as for
		// `kbundle load` (5000 was clamped silently), and KBUNDLE_BUNDLE is
		// read as by `kbundle load` (it was ignored).
		{name: "too many jobs", nodes: []int{0},
			req:  func(d string) loadcmd.Request { return loadcmd.Request{Bundle: file, Dest: d, Jobs: ptr(5000)} },
			kind: loadcmd.Usage, reason: `jobs=5000: must be 0 \(all cores\) to 1024`},
		{name: "bundle from KBUNDLE_BUNDLE", nodes: []int{0, 0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Dest: d, Environ: map[string]string{"KBUNDLE_BUNDLE": file, "KBUNDLE_CACHE_DIR": "/nonexistent"}}
			}, ok: true, presets: "triton"},
		{name: "bad timeout variable", nodes: []int{0, 0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Bundle: file, Dest: d, Environ: map[string]string{"KBUNDLE_TIMEOUT": "soon"}}
			},
			kind: loadcmd.Usage, reason: `KBUNDLE_TIMEOUT: timeout "soon"`},
		{name: "negative timeout", nodes: []int{0},
			req:  func(d string) loadcmd.Request { return loadcmd.Request{Bundle: file, Dest: d, Timeout: ptr(-1.0)} },
			kind: loadcmd.Usage, reason: `timeout=-1`},
		// U10: a typo in the trust settings is a usage error, not an
		// unusable bundle (which the fallback scripts read as "run cold").
		{name: "bad trusted groups", nodes: []int{0, 0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Bundle: file, Dest: d, Environ: map[string]string{"KBUNDLE_TRUSTED_GROUPS": "nosuchgrp-kbundle"}}
			},
			kind: loadcmd.Usage, reason: `KBUNDLE_TRUSTED_GROUPS: "nosuchgrp-kbundle" is not a known name`},
		{name: "bad trusted owners", nodes: []int{0},
			req: func(d string) loadcmd.Request {
				return loadcmd.Request{Bundle: file, Dest: d, Environ: map[string]string{"KBUNDLE_TRUSTED_OWNERS": "root,nosuchuser-kbundle"}}
			},
			kind: loadcmd.Usage, reason: `KBUNDLE_TRUSTED_OWNERS: "nosuchuser-kbundle" is not a known name`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dest := filepath.Join(base, string(rune('a'+i)))
			rs := runAll(t, c.nodes, func(rank int) loadcmd.Request {
				if c.destNodes < 0 {
					return c.req(fmt.Sprintf("%s.n%d", dest, rank/-c.destNodes))
				}
				return c.req(dest)
			})
			same(t, rs)
			r := rs[0]
			if r.OK != c.ok || r.Kind != c.kind {
				t.Fatalf("ok %v kind %q, want %v %q: %+v", r.OK, r.Kind, c.ok, c.kind, r)
			}
			if !regexp.MustCompile(c.reason).MatchString(r.Reason) || !strings.Contains(r.Hint, c.hint) {
				t.Errorf("reason %q hint %q, want /%s/ and %q", r.Reason, r.Hint, c.reason, c.hint)
			}
			if !c.ok {
				if _, err := os.Stat(dest); !os.IsNotExist(err) { // cases with one dest
					t.Errorf("%s exists after a failed load: %v", dest, err)
				}
				return
			}
			if got := strings.Join(r.EmptyPresets, ","); got != c.empty {
				t.Errorf("empty presets %q, want %q", got, c.empty)
			}
			if got := strings.Join(r.Presets, ","); got != c.presets {
				t.Errorf("presets %q, want %q", got, c.presets)
			}
			want := dest
			if c.destNodes > 0 {
				want += ".node0"
			} else if c.destNodes < 0 {
				want += ".n0"
			}
			if r.Dest != want || r.Entries == 0 || r.Ranks != len(c.nodes) || r.Bundle != file {
				t.Errorf("result %+v", r)
			}
			if c.presets == "triton" && (len(r.Env) != 2 || r.Env[0] != "TRITON_CACHE_DIR="+want+"/triton" || r.Env[1] != "TRITON_CACHE_AUTOTUNING=1") ||
				c.presets == "" && len(r.Env) != 0 {
				t.Errorf("env %q", r.Env)
			}
			if _, err := os.Stat(filepath.Join(want, "top.txt")); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDefaultDest: without dest, KBUNDLE_LOCAL_DIR, else `kbundle load`'s
// default under TMPDIR named for the user and the job.
func TestDefaultDest(t *testing.T) {
	_, file := testBundle(t)
	tmp := t.TempDir()
	rs := runAll(t, []int{0, 0}, func(int) loadcmd.Request {
		return loadcmd.Request{Bundle: file, Environ: map[string]string{"TMPDIR": tmp, "SLURM_JOB_ID": "4242"}}
	})
	same(t, rs)
	if !rs[0].OK || rs[0].Dest != filepath.Join(tmp, "kbundle-"+loadcmd.UserName()+"-4242") {
		t.Fatalf("%+v", rs[0])
	}
	local := filepath.Join(t.TempDir(), "local")
	rs = runAll(t, []int{0}, func(int) loadcmd.Request {
		return loadcmd.Request{Bundle: file, Environ: map[string]string{"TMPDIR": tmp, "KBUNDLE_LOCAL_DIR": local}}
	})
	if !rs[0].OK || rs[0].Dest != local {
		t.Fatalf("%+v", rs[0])
	}
	// The destination holds this set now: a re-run leaves it as it is.
	again := func(int) loadcmd.Request {
		return loadcmd.Request{Bundle: file, Environ: map[string]string{"TMPDIR": tmp, "SLURM_JOB_ID": "4242"}}
	}
	rs = runAll(t, []int{0, 1}, again)
	same(t, rs)
	if !rs[0].OK || rs[0].AlreadyNodes != 2 || !rs[0].Already || !strings.HasPrefix(rs[0].ContentDigest, "xxh3-128:") {
		t.Fatalf("re-run: %+v", rs[0])
	}
	// The job compiled more there: the same failure everywhere, with a hint.
	if err := os.WriteFile(filepath.Join(rs[0].Dest, "new.bin"), []byte("compiled"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs = runAll(t, []int{0, 1}, again)
	same(t, rs)
	if rs[0].OK || rs[0].Kind != loadcmd.Failed || !strings.Contains(rs[0].Hint, "force=True") ||
		!strings.Contains(rs[0].Reason, "nothing was installed on any node") || !strings.Contains(rs[0].Reason, "its tree changed since") ||
		!strings.Contains(rs[0].Hint, "call harvest() first") {
		t.Fatalf("%+v", rs[0])
	}
}

// TestLoadFortranErrors: the C entry's answers before any collective, in
// a build without MPI or with MPI not initialised.
func TestLoadFortranErrors(t *testing.T) {
	var r loadcmd.Outcome
	if err := json.Unmarshal(loadFortran(context.Background(), 0, []byte("{")), &r); err != nil || r.OK || r.Kind != loadcmd.Usage {
		t.Errorf("bad JSON: %+v %v", r, err)
	}
	if mpi.Initialized() {
		t.Skip("MPI is initialised")
	}
	r = loadcmd.Outcome{}
	if err := json.Unmarshal(loadFortran(context.Background(), 0, []byte("{}")), &r); err != nil || r.OK || r.Kind != loadcmd.Comm {
		t.Errorf("no MPI: %+v %v", r, err)
	}
}

// TestWarningsFromGo: the warnings Python prints come in the answer, in
// Go's words (python/kbundle/_load.py has none of its own), on success
// and, without strict, on failure.
func TestWarningsFromGo(t *testing.T) {
	_, file := testBundle(t)
	dest := filepath.Join(t.TempDir(), "d")
	rs := runAll(t, []int{0, 0}, func(int) loadcmd.Request {
		return loadcmd.Request{Bundle: file, Dest: dest, Presets: ptr([]string{"jax"})}
	})
	if w := rs[0].Warnings; !rs[0].OK || len(w) != 1 || !strings.HasPrefix(w[0], "warning: the bundle has nothing for preset jax") {
		t.Errorf("warnings %q", w)
	}
	rs = runAll(t, []int{0}, func(int) loadcmd.Request { return loadcmd.Request{Bundle: file + ".nope", Dest: dest + "2"} })
	if w := rs[0].Warnings; rs[0].OK || len(w) != 1 || !strings.HasPrefix(w[0], "not loaded: ") {
		t.Errorf("warnings %q", w)
	}
	b := encode(rs[0])
	if !strings.Contains(string(b), `"warnings":["not loaded: `) {
		t.Errorf("JSON %s", b)
	}
}
