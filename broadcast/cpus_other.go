//go:build !linux

package broadcast

// cpuSet stands in for unix.CPUSet where CPU affinity is not managed.
type cpuSet struct{}

func nodeCPUs(NodeComm) (cpuSet, error) { return cpuSet{}, nil }
func borrowCPUs(cpuSet) func()          { return func() {} }
