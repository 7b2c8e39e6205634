package loadcmd

import (
	"fmt"

	"github.com/kbundle/kbundle/detect"
)

// AllocationWarning is the warning of a load that reached nodes nodes
// while the job's allocation a holds more (a load started on the batch
// line, without srun or mpirun, or mapped onto one node): the
// application's tasks on the others will find no DEST and run cold. ""
// when the load reached them all or the allocation is unknown (issue 25,
// U38). The CLI adds it; load_bundle runs in the application itself, on
// the nodes it runs on.
func AllocationWarning(a detect.Allocation, nodes int) string {
	if a.Nodes <= nodes || nodes < 1 {
		return ""
	}
	start := "srun --ntasks-per-node=1 kbundle load ... (or mpirun --map-by ppr:1:node)"
	if a.Scheduler == "pbs" {
		start = "mpiexec --ppn 1 kbundle load ... (Cray PALS; Open MPI: mpirun --map-by ppr:1:node)"
	}
	return fmt.Sprintf("warning: this job has %d nodes (%s) but the load ran on %s: the application's tasks on the other %d will find no DEST and run cold; start the load with %s",
		a.Nodes, a.Source, plural(nodes, "node"), a.Nodes-nodes, start)
}
