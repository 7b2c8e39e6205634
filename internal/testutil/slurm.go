package testutil

import (
	"regexp"
	"strconv"
)

// Detection is `kbundle detect --json` (the stable fields of issue 3).
type Detection struct {
	Launcher  string `json:"launcher"`
	MPI       bool   `json:"mpi"`
	Rank      int    `json:"rank"`
	Size      int    `json:"size"`
	LocalRank int    `json:"local_rank"`
	LocalSize int    `json:"local_size"`
	Node      int    `json:"node"`
	Mode      string `json:"mode"`
	Reason    string `json:"reason"`
}

var (
	reJobState = regexp.MustCompile(`\bJobState=(\S+)`)
	reExitCode = regexp.MustCompile(`\bExitCode=(\d+):(\d+)`)
	terminal   = map[string]bool{
		"COMPLETED": true, "FAILED": true, "CANCELLED": true, "TIMEOUT": true,
		"NODE_FAIL": true, "PREEMPTED": true, "BOOT_FAIL": true, "DEADLINE": true,
		"OUT_OF_MEMORY": true,
	}
)

// JobEnded reads a Slurm job's record (`scontrol show job -o ID`): ended
// is true once the job is in a final state, with its exit code and
// signal.
func JobEnded(record string) (state string, exit, signal int, ended bool) {
	m := reJobState.FindStringSubmatch(record)
	if m == nil || !terminal[m[1]] {
		return "", 0, 0, false
	}
	if e := reExitCode.FindStringSubmatch(record); e != nil {
		exit, _ = strconv.Atoi(e[1])
		signal, _ = strconv.Atoi(e[2])
	}
	return m[1], exit, signal, true
}
