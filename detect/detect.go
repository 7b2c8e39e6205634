// Package detect decides, from the environment alone and before anything
// collective happens, whether this process is one of several MPI tasks,
// which launcher started it, its rank, size, local rank, local size and
// node. The cache mode (KBUNDLE_MODE, see Mode) is a separate question,
// asked only by the code that acts on it: a bad mode never changes the
// launcher facts.
//
// Detect is a pure function of an environment lookup: it never reads the
// process environment itself (FromEnviron does), never initialises MPI,
// never touches the file system, and never guesses: an unparsable or
// inconsistent launcher variable is an error naming the variable. Once MPI
// is initialised the communicator is the truth; CheckComm compares it
// with the environment's answer.
package detect

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/kbundle/kbundle/launcher"
)

// Unknown is the value of a Result field the environment does not give.
const Unknown = -1

var (
	// ErrInconsistent reports launcher variables that cannot be parsed
	// or contradict each other (rank >= size, negative, non-numeric…).
	ErrInconsistent = errors.New("inconsistent launcher variables")
)

// Result is the decision. Fields the environment does not give are
// Unknown (-1). When MPI is false, Rank is 0 and Size is 1.
type Result struct {
	Launcher  launcher.Family `json:"launcher"`
	MPI       bool            `json:"mpi"` // one of two or more tasks
	Rank      int             `json:"rank"`
	Size      int             `json:"size"` // Unknown only under MPI, for launchers that do not export it
	LocalRank int             `json:"local_rank"`
	LocalSize int             `json:"local_size"`
	Node      int             `json:"node"`
	Reason    string          `json:"reason"` // one line, for humans
}

// FromEnviron runs Detect on the process environment.
func FromEnviron() (Result, error) { return Detect(os.LookupEnv) }

// env wraps the lookup; a nil lookup is an empty environment.
type env func(string) (string, bool)

func (e env) get(name string) (string, bool) {
	if e == nil {
		return "", false
	}
	return e(name)
}

func (e env) has(name string) bool { _, ok := e.get(name); return ok }

// first returns the first variable of names that is set.
func (e env) first(names []string) (name, value string, ok bool) {
	for _, n := range names {
		if v, ok := e.get(n); ok {
			return n, v, true
		}
	}
	return "", "", false
}

// count parses the first set variable of names as a non-negative
// integer; Unknown if none is set.
func (e env) count(names []string) (int, string, error) {
	name, v, ok := e.first(names)
	if !ok {
		return Unknown, "", nil
	}
	n, err := launcher.ParseCount(v)
	if err != nil {
		return 0, name, inconsistent("%s=%w", name, err)
	}
	return n, name, nil
}

func inconsistent(format string, args ...any) error {
	return fmt.Errorf("%w: %w", ErrInconsistent, fmt.Errorf(format, args...))
}

// present reports whether l's markers are in the environment.
func present(e env, l launcher.Launcher) bool {
	found := false
	for _, m := range l.Markers {
		if e.has(m) {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	for _, r := range l.Require {
		if !e.has(r) {
			return false
		}
	}
	return true
}

// Detect decides from the environment given by lookup (os.LookupEnv, or a
// map in tests). The rules, with their reasons, are in docs/launchers.md:
//   - the first launcher of launcher.Table whose markers are present wins,
//     so an MPI launcher's own variables beat stale Slurm ones;
//   - a Slurm batch script (no step, or a negative/reserved step id) and
//     a bare allocation (SLURM_JOB_ID alone) are not tasks;
//   - torch's env:// variables without torchrun's agent (RANK,
//     WORLD_SIZE, MASTER_ADDR, MASTER_PORT) give way to an enclosing
//     launcher of the same size: a job script copied them from it
//     (RANK=$SLURM_PROCID); of another size, they are the inner launcher
//     (`srun deepspeed --no_ssh`);
//   - one task is not MPI;
//   - values are parsed strictly and checked (0 <= rank < size, 0 <=
//     local rank < local size <= size); a violation is ErrInconsistent.
//
// Detect reads launcher variables only; KBUNDLE_MODE is ModeFromEnv's.
func Detect(lookup func(string) (string, bool)) (Result, error) {
	e := env(lookup)
	var batchStep, copied string
	for i, l := range launcher.Table {
		if !present(e, l) {
			continue
		}
		if l.Family == launcher.Slurm {
			v, _ := e.get("SLURM_STEP_ID")
			id, err := launcher.ParseInt(v)
			if err != nil {
				return Result{}, inconsistent("SLURM_STEP_ID=%w", err)
			}
			if !launcher.SlurmStepIsTaskStep(id) {
				batchStep = fmt.Sprintf("Slurm batch step (SLURM_STEP_ID=%s): the batch script itself, not a task", v)
				if id != launcher.SlurmBatchStep && id != launcher.SlurmBatchScript {
					batchStep = fmt.Sprintf("Slurm special step (SLURM_STEP_ID=%s), not an srun step: not a task", v)
				}
				continue
			}
		}
		r, err := fromLauncher(e, l)
		if err != nil {
			return Result{}, err
		}
		if l.Family == launcher.TorchEnv && sameSizeOuter(e, launcher.Table[i+1:], r.Size) {
			copied = fmt.Sprintf("; RANK and WORLD_SIZE=%d (torch env://) taken as copied from it", r.Size)
			continue
		}
		if ignored := outerLaunchers(e, launcher.Table[i+1:], l); len(ignored) > 0 {
			r.Reason += "; ignoring variables of the enclosing " + strings.Join(ignored, ", ")
		}
		r.Reason += copied
		return r, nil
	}
	r := Result{Launcher: launcher.None, Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Node: Unknown}
	switch {
	case batchStep != "":
		r.Reason = batchStep
	case e.has("SLURM_JOB_ID"):
		v, _ := e.get("SLURM_JOB_ID")
		r.Reason = fmt.Sprintf("inside Slurm allocation SLURM_JOB_ID=%s but not in a job step: not a task", quote(v))
	case e.has("PBS_JOBID"):
		v, _ := e.get("PBS_JOBID")
		r.Reason = fmt.Sprintf("inside PBS job PBS_JOBID=%s but not started by a launcher: not a task", quote(v))
	case e.has("FLUX_URI"):
		r.Reason = "inside a Flux instance (FLUX_URI) but not a Flux task: not a task"
	default:
		r.Reason = "no launcher variables: a plain process"
	}
	return r, nil
}

// sameSizeOuter reports whether a launcher of rest is present, is a task
// launcher (not a Slurm batch step), and gives a job of size tasks.
func sameSizeOuter(e env, rest []launcher.Launcher, size int) bool {
	for _, l := range rest {
		if !present(e, l) {
			continue
		}
		if l.Family == launcher.Slurm {
			v, _ := e.get("SLURM_STEP_ID")
			if id, err := launcher.ParseInt(v); err != nil || !launcher.SlurmStepIsTaskStep(id) {
				continue
			}
		}
		if r, err := fromLauncher(e, l); err == nil && r.Size == size {
			return true
		}
	}
	return false
}

// quote returns v as is when it is short and printable, else Go-quoted,
// so that a reason stays on one line.
func quote(v string) string {
	if len(v) <= 64 && !strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r > '~' || r == '"' }) {
		return v
	}
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	return strconv.Quote(v)
}

// outerLaunchers names the launchers after the winner in precedence
// order whose markers are also present (their variables are stale),
// except PALS variables that belong to the winning Slurm or Flux task.
func outerLaunchers(e env, rest []launcher.Launcher, winner launcher.Launcher) []string {
	var names []string
	for _, l := range rest {
		if !present(e, l) {
			continue
		}
		if l.Family == launcher.PALS && (winner.Family == launcher.Slurm || winner.Family == launcher.Flux) {
			continue // checked by checkPALS: they belong to the task
		}
		if explains(winner, e, l) {
			continue // e.g. Intel MPI's Hydra variables are MPICH's markers
		}
		if l.Family == launcher.Slurm {
			v, _ := e.get("SLURM_STEP_ID")
			if id, err := launcher.ParseInt(v); err != nil || !launcher.SlurmStepIsTaskStep(id) {
				continue
			}
		}
		names = append(names, l.Name)
	}
	return names
}

// explains reports whether every present marker of l is a variable the
// winner reads itself.
func explains(winner launcher.Launcher, e env, l launcher.Launcher) bool {
	vars := winner.Vars()
	for _, m := range l.Markers {
		if e.has(m) && !slices.Contains(vars, m) {
			return false
		}
	}
	return true
}

// fromLauncher reads and checks l's variables.
func fromLauncher(e env, l launcher.Launcher) (Result, error) {
	r := Result{Launcher: l.Family}
	var (
		rankVar, sizeVar, lrVar, lsVar string
		err                            error
	)
	if r.Rank, rankVar, err = e.count(l.Rank); err != nil {
		return Result{}, err
	}
	if r.Rank == Unknown {
		m, _, _ := e.first(l.Markers)
		return Result{}, inconsistent("%s: %s is set but none of %s is", l.Name, m, strings.Join(l.Rank, ", "))
	}
	if r.Size, sizeVar, err = e.count(l.Size); err != nil {
		return Result{}, err
	}
	if r.LocalRank, lrVar, err = e.count(l.LocalRank); err != nil {
		return Result{}, err
	}
	if r.LocalSize, lsVar, err = e.count(l.LocalSize); err != nil {
		return Result{}, err
	}
	if r.Node, _, err = e.count(l.Node); err != nil {
		return Result{}, err
	}
	if r.Size == 0 {
		return Result{}, inconsistent("%s=0: a job has at least one task", sizeVar)
	}
	if r.Size != Unknown && r.Rank >= r.Size {
		return Result{}, inconsistent("%s=%d is not below %s=%d", rankVar, r.Rank, sizeVar, r.Size)
	}
	if l.TasksPerNode != "" && r.LocalSize == Unknown {
		if r.LocalSize, lsVar, err = tasksOnNode(e, l.TasksPerNode, r.Node, r.Size, sizeVar); err != nil {
			return Result{}, err
		}
	}
	if r.LocalSize == 0 {
		return Result{}, inconsistent("%s=0: this node runs at least this task", lsVar)
	}
	if r.LocalSize != Unknown && r.LocalRank != Unknown && r.LocalRank >= r.LocalSize {
		return Result{}, inconsistent("%s=%d is not below %s=%d", lrVar, r.LocalRank, lsVar, r.LocalSize)
	}
	if r.LocalSize != Unknown && r.Size != Unknown && r.LocalSize > r.Size {
		return Result{}, inconsistent("%s=%d is above %s=%d", lsVar, r.LocalSize, sizeVar, r.Size)
	}
	if r.LocalRank != Unknown && r.Size != Unknown && r.LocalRank >= r.Size {
		return Result{}, inconsistent("%s=%d is not below %s=%d", lrVar, r.LocalRank, sizeVar, r.Size)
	}
	if l.Family == launcher.Slurm || l.Family == launcher.Flux {
		if err := checkPALS(e, rankVar, r.Rank); err != nil {
			return Result{}, err
		}
	}
	r.MPI = r.Size == Unknown || r.Size > 1
	sizeVal, _ := e.get(sizeVar)
	switch {
	case r.Size == Unknown:
		r.Reason = fmt.Sprintf("%s: %s=%d, job size not in the environment (no %s): treated as MPI",
			l.Name, rankVar, r.Rank, strings.Join(l.Size, ", "))
	case r.MPI:
		r.Reason = fmt.Sprintf("%s: %s=%s", l.Name, sizeVar, sizeVal)
	default:
		r.Reason = fmt.Sprintf("%s started one task (%s=%s): not MPI", l.Name, sizeVar, sizeVal)
	}
	return r, nil
}

// tasksOnNode derives the local size from a Slurm tasks-per-node list
// and checks the list against the job size.
func tasksOnNode(e env, name string, node, size int, sizeVar string) (int, string, error) {
	v, ok := e.get(name)
	if !ok {
		return Unknown, "", nil
	}
	tpn, err := launcher.ParseTasksPerNode(v)
	if err != nil {
		return 0, name, inconsistent("%s: %w", name, err)
	}
	if size != Unknown && tpn.Total() != size {
		return 0, name, inconsistent("%s=%s adds up to %d tasks, not %s=%d", name, v, tpn.Total(), sizeVar, size)
	}
	if node == Unknown {
		return Unknown, "", nil
	}
	n, ok := tpn.OnNode(node)
	if !ok {
		return 0, name, inconsistent("node %d is outside %s=%s (%d nodes)", node, name, v, tpn.Nodes())
	}
	return n, name, nil
}

// checkPALS checks PALS variables set alongside a Slurm or Flux task:
// srun --mpi=cray_shasta and Flux's cray-pals plugin set PALS_RANKID to
// the task's own global rank.
func checkPALS(e env, rankVar string, rank int) error {
	v, ok := e.get("PALS_RANKID")
	if !ok {
		return nil
	}
	n, err := launcher.ParseCount(v)
	if err != nil {
		return inconsistent("PALS_RANKID=%w", err)
	}
	if n != rank {
		return inconsistent("PALS_RANKID=%d differs from %s=%d", n, rankVar, rank)
	}
	return nil
}

// CheckComm compares the environment's answer r with the rank and size
// of MPI_COMM_WORLD once MPI is initialised. It returns "" when they
// agree, else a one-line warning; the caller should then trust the
// communicator. The classic mismatch: an MPICH program under
// `srun --mpi=pmix` starts as N singletons, so Slurm says N tasks and MPI
// says 1.
func CheckComm(r Result, commRank, commSize int) string {
	if commSize < 1 || commRank < 0 || commRank >= commSize {
		return fmt.Sprintf("MPI_COMM_WORLD reports rank %d of %d, which is impossible", commRank, commSize)
	}
	sizeOK := r.Size == Unknown || r.Size == commSize
	if sizeOK && r.Rank == commRank {
		return ""
	}
	envSize := "an unknown number"
	if r.Size != Unknown {
		envSize = fmt.Sprint(r.Size)
	}
	msg := fmt.Sprintf("the environment says rank %d of %s (%s) but MPI_COMM_WORLD says rank %d of %d; using MPI's answer",
		r.Rank, envSize, r.Launcher, commRank, commSize)
	if r.MPI && commSize == 1 {
		msg += " (the MPI library did not connect to the launcher and started as a singleton, " +
			"e.g. an MPICH program under srun --mpi=pmix or under another MPI's mpirun; " +
			"use the launcher, or srun --mpi= plugin, that matches the program's MPI)"
	}
	return msg
}
