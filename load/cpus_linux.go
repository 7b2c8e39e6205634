//go:build linux

package load

import (
	"os"
	"runtime"
	"strconv"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/mpi"
	"golang.org/x/sys/unix"
)

// nodeCPUs returns the union of the CPU affinity masks of node's ranks;
// it is collective over node: one all-reduce of the mask's words. A rank
// whose mask cannot be read adds none.
func nodeCPUs(node broadcast.NodeComm) (unix.CPUSet, error) {
	var mine, all unix.CPUSet
	_ = unix.SchedGetaffinity(0, &mine)
	const bits = 64 // unix.CPUSet's words
	words := make([]int64, len(mine))
	for i, w := range mine {
		words[i] = int64(w)
	}
	if err := broadcast.AllreduceInts(node, words, mpi.Bor); err != nil {
		return all, err
	}
	for i, v := range words {
		for b := range bits {
			if uint64(v)>>b&1 == 1 {
				all.Set(i*bits + b)
			}
		}
	}
	return all, nil
}

// borrowCPUs lets this process run on every CPU of set (the CPUs of its
// node's ranks, which wait idle while the leader extracts): every thread's
// affinity is widened and GOMAXPROCS raised to match. It returns a
// function that puts both back. When set adds nothing, it does nothing.
func borrowCPUs(set unix.CPUSet) (restore func()) {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil || set.Count() <= mine.Count() {
		return func() {}
	}
	prev := runtime.GOMAXPROCS(0)
	setAll(&set)
	if n := set.Count(); n > prev {
		runtime.GOMAXPROCS(n)
	}
	return func() {
		setAll(&mine)
		runtime.GOMAXPROCS(prev)
	}
}

// setAll applies set to every thread of the process (affinity is per
// thread on Linux; threads made later inherit their creator's).
func setAll(set *unix.CPUSet) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		_ = unix.SchedSetaffinity(0, set)
		return
	}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			_ = unix.SchedSetaffinity(tid, set)
		}
	}
}
