package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/mpi"
)

func init() {
	register(&cli.Command{
		Name:  "version",
		Usage: "print kbundle's version, the MPI library it runs with and the MPI ABI it was built for",
		Description: "The mpi line is the first line of MPI_Get_library_version of the library this\n" +
			"process runs with (which LD_LIBRARY_PATH may have swapped for another of the same\n" +
			"ABI), or \"built without MPI\". The abi line is the ABI the binary was built for:\n" +
			"openmpi (Open MPI 4.x, 5.x), mpich (MPICH, Intel MPI, MVAPICH, Cray MPICH), mpi-abi\n" +
			"(the MPI-5 standard ABI, libmpi_abi.so), or none; with the mpi.h it was compiled with.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print a JSON object"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print the MPI library's whole version text"},
		},
		Action: versionAction,
	})
}

// versionInfo is `kbundle version --json`; fields are only ever added.
type versionInfo struct {
	jsonHead
	Version    string `json:"version"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
	MPI        bool   `json:"mpi"`
	MPILibrary string `json:"mpi_library"`
	MPIABI     string `json:"mpi_abi"`    // the ABI built for: openmpi, mpich, mpi-abi, none
	MPIHeader  string `json:"mpi_header"` // the mpi.h built with, e.g. "MPICH 4.0.2"
}

func versionAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("version takes no arguments (got %q)", safe(c.Args().First())), exitUsage)
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, newVersionInfo(c.Bool("verbose")))
	}
	printVersion(c.App.Writer, c.Bool("verbose"))
	return nil
}

func newVersionInfo(verbose bool) versionInfo {
	lib := mpi.LibraryVersion()
	if !verbose {
		lib, _, _ = strings.Cut(lib, "\n")
		lib = strings.Join(strings.Fields(lib), " ")
	}
	return versionInfo{
		jsonHead:   okHead(),
		Version:    version(),
		Go:         runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		MPI:        mpi.Enabled,
		MPILibrary: lib,
		MPIABI:     mpi.BuildFamily(),
		MPIHeader:  mpi.BuildHeader(),
	}
}

// printVersion prints `kbundle version` (and `kbundle --version`).
func printVersion(w io.Writer, verbose bool) {
	info := newVersionInfo(verbose)
	fmt.Fprintf(w, "kbundle %s (%s, %s)\nmpi: %s\nabi: %s (built with %s)\n",
		info.Version, info.Go, info.Platform, info.MPILibrary, info.MPIABI, info.MPIHeader)
}
