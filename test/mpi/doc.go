// Package mpi holds kbundle's end-to-end tests under real MPI
// launchers (Open MPI's mpirun and MPICH's mpiexec.hydra): the mpi
// binding, broadcast.LoadBundle and `kbundle load`, including the
// failure matrix. It has no code of its own; it must never be imported.
// Its name is its folder's; the package it tests is github.com/kbundle/kbundle/mpi.
package mpi
