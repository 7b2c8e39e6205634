// Package cluster holds kbundle's multi-node system tests: the CLI binaries
// (Open MPI and MPICH builds), run as black boxes on a cluster of several
// nodes on one machine made by scripts/ci/nscluster-up.sh (network + UTS +
// mount namespaces, each node with its own host name, address, /dev/shm and
// node-local tmpfs at /tmp/node-local; the root file system plays the
// parallel file system), under mpirun, mpiexec.hydra, srun and sbatch.
//
// The tests skip unless KBUNDLE_TEST_CLUSTER names the cluster's state
// folder (`eval "$(scripts/ci/nscluster-up.sh)"` sets it); a named cluster
// that does not answer is a failure. See docs/cluster.md.
package cluster
