//go:build !linux

package load

import "github.com/kbundle/kbundle/broadcast"

// cpuSet stands in for unix.CPUSet where CPU affinity is not managed.
type cpuSet struct{}

func nodeCPUs(broadcast.NodeComm) (cpuSet, error) { return cpuSet{}, nil }
func borrowCPUs(cpuSet) func()                    { return func() {} }
