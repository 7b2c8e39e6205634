//go:build linux

package load

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBorrowCPUs narrows the process to one CPU, borrows two, and checks
// that affinity and GOMAXPROCS widen and are restored.
func TestBorrowCPUs(t *testing.T) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Skip(err)
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < 2; c++ {
		if orig.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		t.Skip("needs two CPUs")
	}
	origProcs := runtime.GOMAXPROCS(0)
	defer func() {
		setAll(&orig)
		runtime.GOMAXPROCS(origProcs)
	}()
	var one, two unix.CPUSet
	one.Set(cpus[0])
	two.Set(cpus[0])
	two.Set(cpus[1])
	setAll(&one)
	runtime.GOMAXPROCS(1)

	restore := borrowCPUs(two)
	var now unix.CPUSet
	unix.SchedGetaffinity(0, &now)
	if now != two || runtime.GOMAXPROCS(0) != 2 {
		t.Fatalf("borrowed: affinity %d CPUs, GOMAXPROCS %d; want 2, 2", now.Count(), runtime.GOMAXPROCS(0))
	}
	restore()
	unix.SchedGetaffinity(0, &now)
	if now != one || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("restored: affinity %d CPUs, GOMAXPROCS %d; want 1, 1", now.Count(), runtime.GOMAXPROCS(0))
	}
	// Nothing to borrow: a no-op.
	borrowCPUs(one)()
	if runtime.GOMAXPROCS(0) != 1 {
		t.Fatal("borrowing nothing changed GOMAXPROCS")
	}
}
