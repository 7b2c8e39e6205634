package detect

import (
	"fmt"
	"strconv"
	"strings"
)

// An Allocation is the batch allocation a process runs in, as its
// scheduler's variables say: how many nodes it holds. kbundle load
// compares it with the nodes it reached, to warn when a load started
// without srun or mpirun covers one node of several (issue 25, U38).
type Allocation struct {
	Scheduler string // "slurm" or "pbs"; "": none known
	Nodes     int    // 0: not in an allocation, or its size is unknown
	Source    string // where Nodes came from: "SLURM_JOB_NUM_NODES=4", "PBS_NODEFILE (4 hosts)"
}

// maxNodeFile bounds the PBS node file read (one line a slot).
const maxNodeFile = 16 << 20

// AllocationFrom reads the allocation from lookup (os.LookupEnv) and,
// for PBS, the node file through readFile (os.ReadFile). Slurm: inside a
// job (SLURM_JOB_ID), SLURM_JOB_NUM_NODES, else SLURM_NNODES. PBS
// (PBS_JOBID): the distinct hosts of $PBS_NODEFILE, one a line (a host
// once a slot), else PBS_NUM_NODES (Torque). A value that does not parse
// as a count of 1 or more, or a node file that cannot be read, is
// unknown (Nodes 0): the allocation is a hint for a warning, never a
// reason to fail.
func AllocationFrom(lookup func(string) (string, bool), readFile func(string) ([]byte, error)) Allocation {
	e := env(lookup)
	if set(e, "SLURM_JOB_ID") {
		for _, name := range []string{"SLURM_JOB_NUM_NODES", "SLURM_NNODES"} {
			if v, ok := e.get(name); ok {
				if n := count(v); n > 0 {
					return Allocation{Scheduler: "slurm", Nodes: n, Source: name + "=" + v}
				}
			}
		}
		return Allocation{Scheduler: "slurm"}
	}
	if set(e, "PBS_JOBID") {
		if f, ok := e.get("PBS_NODEFILE"); ok && f != "" && readFile != nil {
			if b, err := readFile(f); err == nil && len(b) <= maxNodeFile {
				if n := NodeFileHosts(string(b)); n > 0 {
					return Allocation{Scheduler: "pbs", Nodes: n, Source: fmt.Sprintf("PBS_NODEFILE (%d %s)", n, plural(n, "host", "hosts"))}
				}
			}
		}
		if v, ok := e.get("PBS_NUM_NODES"); ok {
			if n := count(v); n > 0 {
				return Allocation{Scheduler: "pbs", Nodes: n, Source: "PBS_NUM_NODES=" + v}
			}
		}
		return Allocation{Scheduler: "pbs"}
	}
	return Allocation{}
}

// set reports whether the variable name is set and not empty.
func set(e env, name string) bool { v, _ := e.get(name); return v != "" }

// NodeFileHosts is how many distinct hosts a PBS node file names: one
// host a line (repeated once a slot), blank lines and surrounding space
// ignored.
func NodeFileHosts(text string) int {
	seen := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		if h := strings.TrimSpace(l); h != "" {
			seen[h] = true
		}
	}
	return len(seen)
}

// count parses a node count: a decimal of 1 or more; 0 for anything else.
func count(v string) int {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0
	}
	return n
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
