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
		Usage: "print kbundle's version and the MPI library it was built with",
		Description: "The MPI line is MPI_Get_library_version's first line, or \"built without MPI\"\n" +
			"for a build without the mpi tag (which loads as a job of one rank).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print a JSON object"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print the MPI library's whole version text"},
		},
		Action: versionAction,
	})
}

// versionInfo is `kbundle version --json`; fields are only ever added.
type versionInfo struct {
	Version    string `json:"version"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
	MPI        bool   `json:"mpi"`
	MPILibrary string `json:"mpi_library"`
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
		Version:    version(),
		Go:         runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		MPI:        mpi.Enabled,
		MPILibrary: lib,
	}
}

// printVersion prints `kbundle version` (and `kbundle --version`).
func printVersion(w io.Writer, verbose bool) {
	info := newVersionInfo(verbose)
	fmt.Fprintf(w, "kbundle %s (%s, %s)\nmpi: %s\n", info.Version, info.Go, info.Platform, info.MPILibrary)
}
