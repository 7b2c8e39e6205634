package main

import (
	"encoding/json"
	"fmt"
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
	lib := mpi.LibraryVersion()
	if !c.Bool("verbose") {
		lib, _, _ = strings.Cut(lib, "\n")
		lib = strings.Join(strings.Fields(lib), " ")
	}
	info := versionInfo{
		Version:    version(),
		Go:         runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		MPI:        mpi.Enabled,
		MPILibrary: lib,
	}
	if c.Bool("json") {
		b, err := json.MarshalIndent(info, "", "  ")
		if err != nil {
			return cli.Exit(err.Error(), exitError)
		}
		fmt.Fprintf(c.App.Writer, "%s\n", b)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "kbundle %s (%s, %s)\nmpi: %s\n", info.Version, info.Go, info.Platform, info.MPILibrary)
	return nil
}
