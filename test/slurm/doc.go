// Package slurm holds end-to-end tests of kbundle under a real Slurm
// (the one-machine cluster that scripts/ci/slurm-up.sh starts) and checks of
// the shipped job scripts in scripts/slurm and scripts/pbs: lint (bash -n,
// shellcheck), submission with sbatch, and a PBS smoke test under a stand-in
// for PBS and PALS.
//
// It is test-only: it exports nothing and must never be imported. Its tests
// must never leave jobs running (every wait is bounded; a job still running
// at a deadline is cancelled and the test fails) and never start or stop
// the cluster's daemons themselves: that is the test command's job.
//
// Gating: the Slurm tests skip when SLURM_CONF is unset or sinfo is missing,
// unless KBUNDLE_TEST_SLURM=1, which makes them fail instead; the PBS smoke
// test needs real MPI (KBUNDLE_TEST_MPI); the lint test needs shellcheck
// (required when KBUNDLE_TEST_SLURM=1).
package slurm
