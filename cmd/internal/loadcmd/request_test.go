package loadcmd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/broadcast"
)

func ptr[T any](v T) *T { return &v }

// TestResolve: each setting, alike for both front ends: the value given
// wins, then its variable, then the default; one check each.
func TestResolve(t *testing.T) {
	type got struct {
		bundle  string
		jobs    int
		presets string // "recorded" (UseRecorded), then "+" and the names added; without UseRecorded the names
		timeout time.Duration
	}
	for _, c := range []struct {
		name string
		req  Request
		want got
		err  string // substring, CLI's; "" no error
		py   string // Python's, when it differs
	}{
		{name: "defaults", req: Request{Bundle: "b"}, want: got{"b", 0, "recorded", DefaultTimeout}},
		{name: "variables", req: Request{Environ: map[string]string{"KBUNDLE_BUNDLE": "eb", "KBUNDLE_JOBS": "3",
			"KBUNDLE_PRESET": "numba triton", "KBUNDLE_TIMEOUT": "30"}}, want: got{"eb", 3, "recorded+numba,triton", 30 * time.Second}},
		{name: "given wins", req: Request{Bundle: "b", Jobs: ptr(2), Presets: ptr([]string{"jax"}), Timeout: ptr(5.0),
			Environ: map[string]string{"KBUNDLE_BUNDLE": "eb", "KBUNDLE_JOBS": "3", "KBUNDLE_PRESET": "numba", "KBUNDLE_TIMEOUT": "30"}},
			want: got{"b", 2, "recorded+jax", 5 * time.Second}},
		{name: "no presets given", req: Request{Bundle: "b", Presets: ptr([]string{}), Environ: map[string]string{"KBUNDLE_PRESET": "numba"}},
			want: got{"b", 0, "recorded", DefaultTimeout}},
		{name: "replaced", req: Request{Bundle: "b", Presets: ptr([]string{"jax"}), ReplacePresets: true},
			want: got{"b", 0, "jax", DefaultTimeout}},
		{name: "replaced by none", req: Request{Bundle: "b", Presets: ptr([]string{}), ReplacePresets: true},
			want: got{"b", 0, "", DefaultTimeout}},
		{name: "KBUNDLE_BUNDLE beats the cache dir", req: Request{Environ: map[string]string{"KBUNDLE_BUNDLE": "eb", "KBUNDLE_CACHE_DIR": "/c"}},
			want: got{"eb", 0, "recorded", DefaultTimeout}},
		{name: "a dir given beats KBUNDLE_BUNDLE", req: Request{Dir: "/d", Environ: map[string]string{"KBUNDLE_BUNDLE": "eb"}},
			want: got{"/d/" + broadcast.BundleName, 0, "recorded", DefaultTimeout}},
		{name: "the cache dir", req: Request{Environ: map[string]string{"KBUNDLE_CACHE_DIR": "/c"}},
			want: got{"/c/" + broadcast.BundleName, 0, "recorded", DefaultTimeout}},
		{name: "jobs -1", req: Request{Bundle: "b", Jobs: ptr(-1)}, err: "--jobs -1: must be 0 (all cores) to 1024", py: "jobs=-1: must be"},
		{name: "jobs 5000", req: Request{Bundle: "b", Jobs: ptr(5000)}, err: "--jobs 5000: must be", py: "jobs=5000: must be"},
		{name: "KBUNDLE_JOBS", req: Request{Bundle: "b", Environ: map[string]string{"KBUNDLE_JOBS": "2000"}}, err: `KBUNDLE_JOBS="2000"`},
		{name: "timeout", req: Request{Bundle: "b", Timeout: ptr(-1.0)}, err: "--timeout -1: want seconds", py: "timeout=-1: want seconds"},
		{name: "KBUNDLE_TIMEOUT", req: Request{Bundle: "b", Environ: map[string]string{"KBUNDLE_TIMEOUT": "soon"}}, err: `KBUNDLE_TIMEOUT: timeout "soon"`},
		{name: "presets", req: Request{Bundle: "b", Presets: ptr([]string{"bogus,nada"})}, err: `unknown preset "bogus", "nada"`},
		{name: "trust", req: Request{Bundle: "b", Environ: map[string]string{"KBUNDLE_TRUSTED_GROUPS": "nosuchgrp-kbundle"}}, err: "KBUNDLE_TRUSTED_GROUPS"},
		{name: "file and dir", req: Request{Bundle: "b", Dir: "/d"}, err: "not both"},
		{name: "no bundle", req: Request{}, err: "no bundle: pass --bundle FILE", py: "no bundle given: pass bundle=FILE"},
	} {
		for _, f := range []Front{CLI, Python} {
			if c.req.Environ == nil {
				c.req.Environ = map[string]string{}
			}
			o, err := Resolve(c.req, f, 0)
			want := c.err
			if f == Python && c.py != "" {
				want = c.py
			}
			if want != "" {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s, front %d: %v, want %q", c.name, f, err, want)
				}
				if f == CLI && !errors.Is(err, ErrUsage) {
					t.Errorf("%s: %v is not a usage error", c.name, err)
				}
				continue
			}
			p := o.plan
			var names []string
			for _, ps := range p.Presets {
				names = append(names, ps.Name)
			}
			g := got{p.Bundle, p.Jobs, strings.Join(names, ","), o.Timeout}
			if p.UseRecorded && len(names) > 0 {
				g.presets = "recorded+" + g.presets
			} else if p.UseRecorded {
				g.presets = "recorded"
			}
			if err != nil || g != c.want {
				t.Errorf("%s, front %d: %+v %v, want %+v", c.name, f, g, err, c.want)
			}
		}
	}
}

// TestResolveTimeoutAlways: whatever else is wrong, the guard gets a
// timeout.
func TestResolveTimeoutAlways(t *testing.T) {
	o, err := Resolve(Request{Environ: map[string]string{"KBUNDLE_TIMEOUT": "soon"}}, Python, 0)
	if err == nil || o.Timeout != DefaultTimeout {
		t.Errorf("%v %v", o.Timeout, err)
	}
	o, err = Resolve(Request{Jobs: ptr(-1), Timeout: ptr(7.0)}, Python, 0)
	if err == nil || o.Timeout != 7*time.Second {
		t.Errorf("%v %v", o.Timeout, err)
	}
}

// TestResolvePythonReadsOnlyItsEnviron: load_bundle's request carries its
// environment; the process's is never read (V3 of the security review).
func TestResolvePythonReadsOnlyItsEnviron(t *testing.T) {
	t.Setenv("KBUNDLE_BUNDLE", "/from/process")
	if o, _ := Resolve(Request{}, Python, 1); o.plan.Bundle != "" {
		t.Errorf("Python read the process's KBUNDLE_BUNDLE: %q", o.plan.Bundle)
	}
	if o, err := Resolve(Request{}, CLI, 0); err != nil || o.plan.Bundle != "/from/process" {
		t.Errorf("the CLI did not: %q %v", o.plan.Bundle, err)
	}
}

// TestResolveGPUArchAndPython: --gpu-arch, else KBUNDLE_GPU_ARCH, read as
// preset.ParseGPUArch reads them (a usage error otherwise); the Python
// asked is the one given, else KBUNDLE_PYTHON.
func TestResolveGPUArchAndPython(t *testing.T) {
	for _, c := range []struct {
		req  Request
		want string
		err  string
	}{
		{Request{Bundle: "b"}, "", ""},
		{Request{Bundle: "b", GPUArch: "9.0"}, "cuda:90", ""},
		{Request{Bundle: "b", GPUArch: "all", Environ: map[string]string{"KBUNDLE_GPU_ARCH": "sm_80"}}, "all", ""},
		{Request{Bundle: "b", Environ: map[string]string{"KBUNDLE_GPU_ARCH": "sm_80"}}, "cuda:80", ""},
		{Request{Bundle: "b", GPUArch: "h100"}, "", `--gpu-arch h100: not a GPU architecture: "h100"`},
		{Request{Bundle: "b", Environ: map[string]string{"KBUNDLE_GPU_ARCH": "x"}}, "", `KBUNDLE_GPU_ARCH="x": not a GPU architecture`},
	} {
		o, err := Resolve(c.req, CLI, 0)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrUsage)):
			t.Errorf("%+v: %v, want %q", c.req, err, c.err)
		case c.err == "" && (err != nil || o.plan.GPUArch != c.want):
			t.Errorf("%+v: %q %v, want %q", c.req, o.plan.GPUArch, err, c.want)
		}
	}
	o, err := Resolve(Request{Bundle: "b", Python: "/nonexistent/python", Environ: map[string]string{"KBUNDLE_PYTHON": "/other"}}, Python, 0)
	if err != nil || o.plan.Toolchain == nil {
		t.Fatal(err)
	}
	if _, err := o.plan.Toolchain([]string{"toolchain.python"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/python") {
		t.Errorf("the Python given is not the one asked: %v", err)
	}
}

// TestRanksOnNode: the launcher's count of ranks on this node, trusted
// only where its rank and size are the communicator's.
func TestRanksOnNode(t *testing.T) {
	ompi := func(rank, size, local string) map[string]string {
		return map[string]string{"OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": size, "OMPI_COMM_WORLD_LOCAL_SIZE": local,
			"OMPI_COMM_WORLD_LOCAL_RANK": "0"}
	}
	for _, c := range []struct {
		name       string
		env        map[string]string
		rank, size int
		want       int
	}{
		{"one a node", ompi("2", "3", "1"), 2, 3, 1},
		{"four a node", ompi("2", "12", "4"), 2, 12, 4},
		{"no launcher, one rank", map[string]string{}, 0, 1, 1},
		{"another size: a sub-communicator", ompi("2", "3", "1"), 0, 2, 0},
		{"another rank", ompi("2", "3", "1"), 1, 3, 0},
		{"a singleton under a launcher", ompi("2", "3", "1"), 0, 1, 0},
		{"unparsable", ompi("2", "3", "x"), 2, 3, 0},
		{"hydra", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALNRANKS": "1", "MPI_LOCALRANKID": "0", "HYDRA_CONTROL_FD": "5"}, 1, 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
			if got := ranksOnNode(lookup, c.rank, c.size); got != c.want {
				t.Errorf("ranksOnNode = %d, want %d", got, c.want)
			}
		})
	}
}
