package mpi

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// The PyPI runtimes (testutil.ExtraRuntimes: Open MPI 5.0.11, MPICH 5.0.2,
// Intel MPI 2021.19.0) run the builds made with Debian's compilers: the
// Open MPI build under Open MPI 5, the MPICH build under MPICH 5 and
// Intel MPI (testutil.Runtime.Env puts the runtime's lib first). Each gets
// detect at np 1, 2, 4, one load per np and one unusable bundle; the full
// matrix stays with Debian's two.

// TestRuntimeDetect is TestDetectLive under the PyPI runtimes.
func TestRuntimeDetect(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	for _, rt := range testutil.ExtraRuntimes() {
		t.Run(rt.Name, func(t *testing.T) {
			testutil.NeedRuntime(t, rt)
			prog := buildDetectRanks(t, rt.Build)
			for _, np := range []int{1, 2, 4} {
				t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
					so, se, code := testutil.RunRuntime(t, rt, np, []string{"KBUNDLE_MODE="}, prog, kb)
					if code != 0 {
						t.Fatalf("%s np %d: exit %d\nstdout:\n%s\nstderr:\n%s", rt.Name, np, code, so, se)
					}
					checkLive(t, so, np, rt.Family, rt.Name != "openmpi5")
				})
			}
		})
	}
}

// tracedWrapper is rankWrapper with every open of the rank traced into
// dir/strace.RANK (when traced), and the command in its own session: MPICH
// 5's Hydra and Open MPI 5's prterun kill what they started once the job
// is done or one task failed, which could kill a wrapper before it wrote
// the status. Read the statuses with settledCodes.
func tracedWrapper(t *testing.T, traced bool) (script, dir string) {
	t.Helper()
	dir = t.TempDir()
	script = filepath.Join(dir, "wrap.sh")
	run := `"$@"`
	if traced {
		run = `strace -ff -qq -y -e trace=open,openat,openat2 -o "$KB_DIR/strace.$KB_R" "$@"`
	}
	body := `#!/bin/sh
export KB_DIR="` + dir + `" KB_R="${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}"
setsid sh -c '` + run + `; rc=$?; echo $rc >"$KB_DIR/.rc.$KB_R"; mv "$KB_DIR/.rc.$KB_R" "$KB_DIR/rc.$KB_R"; exit $rc' sh "$@" &
wait $!
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, dir
}

// settledCodes waits (up to 20 s) for np statuses from tracedWrapper's
// script, then checks that each is want.
func settledCodes(t *testing.T, dir string, np, want int, stderr string) {
	t.Helper()
	for range 200 {
		files, _ := filepath.Glob(filepath.Join(dir, "rc.[0-9]*"))
		if len(files) >= np {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantExits(t, dir, np, want, stderr)
}

// opens counts the successful opens of path over every rank's trace.
func opens(t *testing.T, dir, path string) int {
	t.Helper()
	traces, _ := filepath.Glob(filepath.Join(dir, "strace.*"))
	if len(traces) == 0 {
		t.Fatalf("no strace output in %s", dir)
	}
	n := 0
	for _, tr := range traces {
		b, _ := os.ReadFile(tr)
		k, _ := testutil.TraceOpens(string(b), path)
		n += k
	}
	return n
}

// TestRuntimeLoad: `kbundle load` under each PyPI runtime (np 1, 2, 4)
// gives DEST equal to the tree, prints DEST once, opens the bundle once
// in the whole job (strace over every rank), and every rank exits 0;
// `kbundle version` names the runtime's library, not the build's.
func TestRuntimeLoad(t *testing.T) {
	tree := makeTree(t)
	file := packTree(t, tree)
	for _, rt := range testutil.ExtraRuntimes() {
		t.Run(rt.Name, func(t *testing.T) {
			testutil.NeedRuntime(t, rt)
			kb := testutil.Kbundle(t, rt.Build)
			so, se, code := testutil.RunRuntime(t, rt, 1, nil, kb, "version")
			if code != 0 || !strings.Contains(so, "mpi: "+rt.Library) {
				t.Errorf("version under %s: exit %d, want %q\nstdout:\n%s\nstderr:\n%s", rt.Name, code, rt.Library, so, se)
			}
			for _, np := range []int{1, 2, 4} {
				t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
					dest := filepath.Join(t.TempDir(), "dest")
					wrap, dir := tracedWrapper(t, true)
					so, se, code := testutil.RunRuntime(t, rt, np, nil, wrap, kb, "load", "--bundle", file, "--to", dest)
					if code != 0 {
						t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, so, se)
					}
					settledCodes(t, dir, np, 0, se)
					if so != dest+"\n" {
						t.Errorf("stdout %q, want DEST once", so)
					}
					if n := opens(t, dir, file); n != 1 {
						t.Errorf("the bundle was opened %d times in the job, want once", n)
					}
					sameTrees(t, tree, dest)
				})
			}
		})
	}
}

// TestRuntimeUnusable: a bit-flipped bundle under each PyPI runtime (np
// 4): every rank exits 3, rank 0's reason
// once, nothing at DEST.
func TestRuntimeUnusable(t *testing.T) {
	tree := makeTree(t)
	c := failCases[1] // bit flipped
	for _, rt := range testutil.ExtraRuntimes() {
		t.Run(rt.Name, func(t *testing.T) {
			testutil.NeedRuntime(t, rt)
			kb := testutil.Kbundle(t, rt.Build)
			file := packTree(t, tree)
			dest := filepath.Join(t.TempDir(), "node", "dest")
			os.MkdirAll(filepath.Dir(dest), 0o700)
			args := c.setup(t, file, dest)
			np := 4
			wrap, codes := tracedWrapper(t, false)
			so, se, code := testutil.RunRuntime(t, rt, np, keepGoing, append([]string{wrap, kb, "load", "--to", dest}, args...)...)
			settledCodes(t, codes, np, c.code, se)
			checkFailure(t, c, np, codes, dest, so, se, code)
		})
	}
}

// TestABIFamilies: one binary per MPI ABI under every runtime of its
// family. The Open MPI build (Debian's mpicc.openmpi, libmpi.so.40) runs
// under Open MPI 4.1 and 5.0; the MPICH build (mpicc.mpich,
// libmpich.so.12) under MPICH 4.0, MPICH 5.0 and Intel MPI; the MPI-5
// standard ABI build (MPICH 5's mpicc_abi, libmpi_abi.so.1) under MPICH 5
// and Intel MPI. Each loads at np 2 and names the library it runs with.
func TestABIFamilies(t *testing.T) {
	tree := makeTree(t)
	file := packTree(t, tree)
	families := []struct {
		build    testutil.Variant
		abi      string
		runtimes []string
	}{
		{testutil.OpenMPI, "openmpi", []string{"openmpi4", "openmpi5"}},
		{testutil.MPICH, "mpich", []string{"mpich4", "mpich5", "impi"}},
		{testutil.MPIABI, "mpi-abi", []string{"mpich5", "impi"}},
	}
	for _, f := range families {
		for _, name := range f.runtimes {
			rt := testutil.RuntimeByName(name)
			rt.Build = f.build
			t.Run(string(f.build)+"/"+name, func(t *testing.T) {
				testutil.NeedRuntime(t, rt)
				kb := testutil.Kbundle(t, f.build)
				so, se, code := testutil.RunRuntime(t, rt, 1, nil, kb, "version")
				if code != 0 || !strings.Contains(so, "mpi: "+rt.Library) || !strings.Contains(so, "abi: "+f.abi+" ") {
					t.Errorf("version: exit %d, want mpi: %q and abi: %s\nstdout:\n%s\nstderr:\n%s", code, rt.Library, f.abi, so, se)
				}
				dest := filepath.Join(t.TempDir(), "dest")
				so, se, code = testutil.RunRuntime(t, rt, 2, nil, kb, "load", "--json", "--bundle", file, "--to", dest)
				var s struct {
					Ranks int  `json:"ranks"`
					MPI   bool `json:"mpi"`
				}
				if err := json.Unmarshal([]byte(so), &s); code != 0 || err != nil || s.Ranks != 2 || !s.MPI {
					t.Fatalf("exit %d (%v)\nstdout:\n%s\nstderr:\n%s", code, err, so, se)
				}
				sameTrees(t, tree, dest)
			})
		}
	}
}

// TestLoadMismatchRefused: a build for another MPI, or without MPI, under
// a launcher of 2 tasks exits 2 on every task, before MPI_Init, with one
// message from the launcher's rank 0 naming the fix, and leaves nothing;
// --per-task keeps the old behaviour (TestLoadWithoutMPIUnderLauncher).
func TestLoadMismatchRefused(t *testing.T) {
	file := packTree(t, makeTree(t))
	cases := []struct {
		build   testutil.Variant
		runtime string
		want    string
	}{
		{testutil.OpenMPI, "mpich4", "this kbundle is built for Open MPI but runs under Hydra (MPICH) (2 tasks): use mpirun.openmpi, or the MPICH build"},
		{testutil.OpenMPI, "mpich5", "built for Open MPI but runs under Hydra (MPICH)"},
		{testutil.OpenMPI, "impi", "built for Open MPI but runs under Hydra (Intel MPI) (2 tasks): use mpirun.openmpi"},
		{testutil.MPICH, "openmpi4", "built for MPICH (or an MPI of its ABI) but runs under Open MPI's mpirun (2 tasks): use mpiexec.hydra"},
		{testutil.MPICH, "openmpi5", "built for MPICH (or an MPI of its ABI) but runs under Open MPI's mpirun"},
		{testutil.NoMPI, "openmpi5", "built without MPI but runs under Open MPI's mpirun (2 tasks)"},
		{testutil.NoMPI, "impi", "built without MPI but runs under Hydra (Intel MPI) (2 tasks)"},
	}
	for _, c := range cases {
		rt := testutil.RuntimeByName(c.runtime)
		t.Run(fmt.Sprintf("%s/%s", c.build, c.runtime), func(t *testing.T) {
			testutil.NeedRuntime(t, rt)
			kb := testutil.Kbundle(t, c.build)
			dest := filepath.Join(t.TempDir(), "node", "dest")
			os.MkdirAll(filepath.Dir(dest), 0o700)
			wrap, codes := tracedWrapper(t, false)
			so, se, code := testutil.RunRuntime(t, rt, 2, keepGoing, wrap, kb, "load", "--bundle", file, "--to", dest)
			settledCodes(t, codes, 2, 2, se)
			checkFailure(t, failCase{code: 2, reason: c.want}, 2, codes, dest, so, se, code)
			if !strings.Contains(se, "--per-task") {
				t.Errorf("the message does not name --per-task\n%s", se)
			}
		})
	}
}

// TestCollectivesMismatchRefused is TestLoadMismatchRefused for the other
// collectives, harvest and per-node status: the same refusal, exit 2 on
// every task, one message naming the fix (and not --per-task, which only
// load has).
func TestCollectivesMismatchRefused(t *testing.T) {
	file := packTree(t, makeTree(t))
	cases := []struct {
		build   testutil.Variant
		runtime string
		want    string
	}{
		{testutil.OpenMPI, "mpich5", "this kbundle is built for Open MPI but runs under Hydra (MPICH) (2 tasks): use mpirun.openmpi, or the MPICH build"},
		{testutil.MPICH, "openmpi5", "built for MPICH (or an MPI of its ABI) but runs under Open MPI's mpirun (2 tasks): use mpiexec.hydra"},
	}
	for _, c := range cases {
		rt := testutil.RuntimeByName(c.runtime)
		for _, cmd := range []string{"harvest", "status"} {
			t.Run(fmt.Sprintf("%s/%s/%s", cmd, c.build, c.runtime), func(t *testing.T) {
				testutil.NeedRuntime(t, rt)
				kb := testutil.Kbundle(t, c.build)
				dest := filepath.Join(t.TempDir(), "node", "dest")
				os.MkdirAll(filepath.Dir(dest), 0o700)
				argv := []string{kb, "status", dest}
				if cmd == "harvest" {
					argv = []string{kb, "harvest", "--bundle", file, "--to", dest}
				}
				wrap, codes := tracedWrapper(t, false)
				so, se, code := testutil.RunRuntime(t, rt, 2, keepGoing, append([]string{wrap}, argv...)...)
				settledCodes(t, codes, 2, 2, se)
				checkFailure(t, failCase{code: 2, reason: c.want}, 2, codes, dest, so, se, code)
				if strings.Contains(se, "--per-task") {
					t.Errorf("%s's message names --per-task, which only load has\n%s", cmd, se)
				}
			})
		}
	}
}
