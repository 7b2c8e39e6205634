// Command kbundle-front is the program installed as kbundle (make build's
// bin/kbundle, make install's PREFIX/bin/kbundle, the wheel's
// kbundle/bin/kbundle): a small front that runs the build of kbundle
// matching the MPI it runs under. It reads the launcher's variables
// (package detect), picks one of the builds in its own folder,
// kbundle-openmpi, kbundle-mpich, kbundle-mpiabi or kbundle-nompi
// (detect.ChooseBuild), and replaces itself with it (execve), the
// arguments and the environment unchanged: without a launcher the build
// without MPI, under Open MPI's mpirun the Open MPI build, under Hydra
// the MPICH build, and so on. KBUNDLE_BUILD=none|openmpi|mpich|mpi-abi
// names the build instead. `kbundle version` says which build ran (its
// abi line).
//
// It must never initialise MPI nor link C (it is built with
// CGO_ENABLED=0, so it runs on any Linux of its architecture), and it
// reads nothing but the environment and the names in its folder: all the
// rest is the build's.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kbundle/kbundle/detect"
)

// binaries names each build's file beside the front.
var binaries = map[detect.ABI]string{
	detect.ABINone:     "kbundle-nompi",
	detect.ABIOpenMPI:  "kbundle-openmpi",
	detect.ABIMPICH:    "kbundle-mpich",
	detect.ABIStandard: "kbundle-mpiabi",
}

// Exit statuses, as the CLI's (docs/commands/README.md).
const (
	exitError = 1
	exitUsage = 2
)

func main() {
	path, code, msg := choose(os.LookupEnv)
	if msg != "" {
		fmt.Fprint(os.Stderr, msg)
		os.Exit(code)
	}
	err := syscall.Exec(path, append([]string{path}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "kbundle: cannot run %s: %v\n", path, err)
	os.Exit(exitError)
}

// choose returns the build to run, or an exit status and a message
// (kbundle: lines) when there is none.
func choose(lookup func(string) (string, bool)) (path string, code int, msg string) {
	self, err := os.Executable() // symlinks resolved: the folder the builds are in
	if err != nil {
		return "", exitError, fmt.Sprintf("kbundle: cannot find the folder of this program: %v\n", err)
	}
	dir := filepath.Dir(self)
	at := func(a detect.ABI) string { return filepath.Join(dir, binaries[a]) }
	have := func(a detect.ABI) bool { return executable(at(a)) }
	if v, ok := lookup("KBUNDLE_BUILD"); ok && v != "" {
		a, ok := detect.ParseABI(v)
		if !ok {
			return "", exitUsage, fmt.Sprintf("kbundle: KBUNDLE_BUILD=%q: want none, openmpi, mpich or mpi-abi\n", v)
		}
		if !have(a) {
			return "", exitError, fmt.Sprintf("kbundle: KBUNDLE_BUILD=%s, but %s is not installed\n", v, at(a))
		}
		return at(a), 0, ""
	}
	a := detect.ABINone
	// Inconsistent launcher variables: the build without MPI reports
	// them (every build detects the same way) and still runs the
	// per-task commands.
	if r, err := detect.Detect(lookup); err == nil {
		a = detect.ChooseBuild(lookup, r, have)
	}
	if !have(a) {
		return "", exitError, fmt.Sprintf("kbundle: %s is not installed beside %s\n"+
			"kbundle: hint: make build (or make install) puts kbundle-nompi, kbundle-openmpi and kbundle-mpich there\n",
			binaries[a], self)
	}
	return at(a), 0, ""
}

// executable reports whether path is a regular file someone may execute.
func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
