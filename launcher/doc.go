// Package launcher describes what each job launcher (Open MPI mpirun,
// MPICH Hydra, Intel MPI, MVAPICH2 mpirun_rsh, HPE Cray PALS, Cray ALPS,
// Slurm srun, Flux) puts in the environment of the processes it starts:
// the variables that identify it and those that carry rank, size, local
// rank, local size and node id. It also holds the strict parsers those
// values need (decimal integers, Slurm's "2(x3),1" tasks-per-node lists)
// and the list of launcher variables to scrub from a child's environment.
//
// The package is data plus parsers: it never reads the process
// environment, never decides anything (package detect does), and never
// guesses a value it cannot parse.
//
// Adding a launcher means adding one entry to Table, with the sources its
// variable names come from. Two other places name launcher variables and
// may need a line: package detect's job-level variables, which say a
// process is inside a job but not one of its tasks (SLURM_JOB_ID, Slurm's
// special step ids, PBS_JOBID, FLUX_URI), and the job-id variables of
// kbundle load's default destination (docs/commands/load.md, "DEST").
package launcher
