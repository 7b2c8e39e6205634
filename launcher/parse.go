package launcher

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxID is the largest rank, size or node id accepted: MPI counts ranks
// with a C int.
const MaxID = math.MaxInt32

var (
	// ErrSyntax reports a value that is not a plain decimal integer.
	ErrSyntax = errors.New("not a decimal integer")
	// ErrRange reports an integer outside what the variable may hold.
	ErrRange = errors.New("out of range")
)

// ParseInt parses s strictly as a decimal integer: an optional '-' and
// ASCII digits only, no '+', spaces, underscores, hex or empty string, and
// a magnitude of at most MaxID (or, for Slurm's unsigned step ids, up to
// math.MaxUint32 so they can be recognised as special).
func ParseInt(s string) (int64, error) {
	digits, neg := strings.CutPrefix(s, "-")
	if digits == "" || !allDigits(digits) {
		return 0, fmt.Errorf("%s: %w", short(s), ErrSyntax)
	}
	v, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || v > math.MaxUint32 {
		return 0, fmt.Errorf("%s: %w", short(s), ErrRange)
	}
	if neg {
		return -int64(v), nil
	}
	return int64(v), nil
}

// ParseCount parses a non-negative id or count (rank, size, node id):
// strict decimal, 0 <= v <= MaxID.
func ParseCount(s string) (int, error) {
	v, err := ParseInt(s)
	if err != nil {
		return 0, err
	}
	if v < 0 || v > MaxID {
		return 0, fmt.Errorf("%s: %w (want 0..%d)", short(s), ErrRange, MaxID)
	}
	return int(v), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Slurm special step ids (slurm/slurm.h). Slurm prints step ids with %d
// in some places and %u in others, so the batch step shows as -5 or as
// 4294967291; anything at or above SlurmMaxNormalStepID is not a step
// that srun launched.
const (
	SlurmMaxNormalStepID = 0xfffffff0
	SlurmBatchScript     = 0xfffffffb // the batch step, printed with %u
	SlurmBatchStep       = -5         // the batch step, printed with %d
)

// SlurmStepIsTaskStep reports whether a parsed SLURM_STEP_ID names an
// ordinary srun step: negative values (the batch step as -5, the extern
// step as -4, …) and the reserved unsigned ids at or above
// SlurmMaxNormalStepID are not.
func SlurmStepIsTaskStep(id int64) bool {
	return id >= 0 && id < SlurmMaxNormalStepID
}

// Run is one item of a Slurm tasks-per-node list: Tasks tasks on each of
// Repeat consecutive nodes ("2(x3)" is Run{2, 3}).
type Run struct {
	Tasks, Repeat int
}

// TasksPerNode is a parsed SLURM_STEP_TASKS_PER_NODE or
// SLURM_TASKS_PER_NODE value such as "2(x3),1". It is kept run-length
// encoded so that a huge repeat count cannot make it allocate.
type TasksPerNode []Run

// ParseTasksPerNode parses Slurm's tasks-per-node format: comma-separated
// items, each "N" or "N(xM)" with N >= 0 and M >= 1 decimal integers. The
// node count and task total must each fit in MaxID.
func ParseTasksPerNode(s string) (TasksPerNode, error) {
	if s == "" {
		return nil, fmt.Errorf("tasks per node %s: %w", short(s), ErrSyntax)
	}
	var (
		out          TasksPerNode
		nodes, total int64
	)
	for item := range strings.SplitSeq(s, ",") {
		n, rep := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasSuffix(item, ")") || !strings.HasPrefix(item[i:], "(x") {
				return nil, fmt.Errorf("tasks per node %s: item %s: %w", short(s), short(item), ErrSyntax)
			}
			n, rep = item[:i], item[i+2:len(item)-1]
		}
		tasks, err := ParseCount(n)
		if err != nil {
			return nil, fmt.Errorf("tasks per node %s: %w", short(s), err)
		}
		repeat, err := ParseCount(rep)
		if err != nil {
			return nil, fmt.Errorf("tasks per node %s: %w", short(s), err)
		}
		if repeat < 1 {
			return nil, fmt.Errorf("tasks per node %s: repeat count 0: %w", short(s), ErrRange)
		}
		nodes += int64(repeat)
		total += int64(tasks) * int64(repeat)
		if nodes > MaxID || total > MaxID {
			return nil, fmt.Errorf("tasks per node %s: more than %d nodes or tasks: %w", short(s), MaxID, ErrRange)
		}
		out = append(out, Run{Tasks: tasks, Repeat: repeat})
	}
	return out, nil
}

// Nodes returns the number of nodes the list describes.
func (t TasksPerNode) Nodes() int {
	n := 0
	for _, r := range t {
		n += r.Repeat
	}
	return n
}

// Total returns the number of tasks over all nodes.
func (t TasksPerNode) Total() int {
	n := 0
	for _, r := range t {
		n += r.Tasks * r.Repeat
	}
	return n
}

// OnNode returns the number of tasks on node (0-based, in list order), or
// false if node is outside the list.
func (t TasksPerNode) OnNode(node int) (int, bool) {
	if node < 0 {
		return 0, false
	}
	for _, r := range t {
		if node < r.Repeat {
			return r.Tasks, true
		}
		node -= r.Repeat
	}
	return 0, false
}

// String formats the list the way Slurm does ("2(x3),1").
func (t TasksPerNode) String() string {
	var b strings.Builder
	for i, r := range t {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r.Tasks))
		if r.Repeat != 1 {
			fmt.Fprintf(&b, "(x%d)", r.Repeat)
		}
	}
	return b.String()
}

// short quotes s for an error message, cut to a readable length.
func short(s string) string {
	const max = 40
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}
