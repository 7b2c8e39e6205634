package harvest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kbundle/kbundle/preset"
)

// A Cause is the likely reason a node's units of a preset went unused,
// or were compiled again: the first rule of causeRules that holds.
type Cause struct {
	Rule string `json:"rule"` // causeRules' name: "exports", "toolchain", "key", "machine", "unread"
	Text string `json:"text"` // the report's words
	// Verdict is the job's line after "cache: " ("loaded but unused:
	// pass NUMBA_CACHE_DIR").
	Verdict string `json:"verdict"`
}

// The reasons a key moved that a node's files show (PresetUse.moved).
const (
	movedNumba    = "numba-source"
	movedTriton   = "triton-options"
	movedJAX      = "jax-topology"
	movedVLLMRank = "vllm-rank"
	movedVLLMHash = "vllm-hash"
)

// causeInput is what the rules see of one node's use of one preset.
type causeInput struct {
	use      *PresetUse
	preset   *preset.Preset // nil: unknown
	node     *list
	recorded map[string]string // the set's base's metadata (nil: unknown)
}

// A causeRule names a likely cause when it holds.
type causeRule struct {
	name string
	// why returns the report's words and the verdict's ("" when the
	// rule does not hold).
	why func(c *causeInput) (text, verdict string)
}

// causeRules, checked in order: the first that holds is the cause. A job
// that ran warm (troubled is false) is not checked.
var causeRules = []causeRule{
	{"exports", exportsRule},
	{"toolchain", func(c *causeInput) (string, string) { return missRule(c, true) }},
	{"key", keyRule},
	{"machine", func(c *causeInput) (string, string) { return missRule(c, false) }},
	{"unread", unreadRule},
}

func findCause(c *causeInput) *Cause {
	for _, r := range causeRules {
		if text, v := r.why(c); text != "" {
			return &Cause{Rule: r.name, Text: text, Verdict: v}
		}
	}
	return nil
}

// untouched: the node read nothing of the preset's and compiled nothing
// into its directory.
func untouched(c *causeInput) bool {
	return c.use.Used == 0 && c.use.New == 0 && c.use.Recompiled == 0 && !c.use.wrote && c.node.UsageUnknown == ""
}

// exportsRule: the exports never reached the application. Nothing under
// the preset's directory of DEST was read or written, and its variable
// was not passed to this step of the job either.
func exportsRule(c *causeInput) (string, string) {
	if !untouched(c) || c.preset == nil {
		return "", ""
	}
	var missing []string
	for _, v := range c.preset.Vars {
		if slices.Contains(c.node.Unpassed, v.Name) {
			missing = append(missing, v.Name)
		}
	}
	if len(missing) == 0 {
		return "", ""
	}
	v := missing[0]
	pass := fmt.Sprintf("pass %s (`mpirun -x %s`, or `srun --export=ALL`)", v, v)
	return fmt.Sprintf("loaded but unused: the job read none of them and wrote nothing in DEST/%s, and %s was not passed to it: %s",
		c.preset.Subdir, v, pass), "loaded but unused: " + pass
}

// unreadRule: nothing read or written, although the variable was
// passed here: the application ran none of the framework's code, or
// another step of the job did not get the variable.
func unreadRule(c *causeInput) (string, string) {
	if !untouched(c) || c.preset == nil {
		return "", ""
	}
	v := c.preset.Framework + "'s cache variable"
	for _, x := range c.preset.Vars {
		if x.Dir {
			v = x.Name
			break
		}
	}
	return fmt.Sprintf("loaded but unused: the job read none of them and wrote nothing in DEST/%s: it ran no %s code, or its step was not given %s",
		c.preset.Subdir, c.preset.Framework, v), "loaded but unused: did the application get " + v + "?"
}

// missRule: the toolchain (software, by the rule table of warmup's
// ReuseRules) or the machine (GPU, then CPU) differs from the one the
// set recorded at warm-up, in a way the preset's framework keys on.
func missRule(c *causeInput, software bool) (string, string) {
	if c.preset == nil || c.recorded == nil || c.node.Local == nil || untouched(c) {
		return "", ""
	}
	for _, m := range preset.Misses([]*preset.Preset{c.preset}, c.recorded, c.node.Local) {
		if preset.IsToolchainKey(m.Key) != software || !slices.Contains(m.Presets, c.preset.Name) && len(m.Presets) > 0 {
			continue
		}
		what := "the toolchain differs from the warm-up's"
		if !software {
			what = "another machine than the warm-up's"
			if strings.HasPrefix(m.Key, "gpu.") {
				what = "another GPU architecture than the warm-up's"
			}
		}
		return what + ": " + m.String(), fmt.Sprintf("%s compiled again: %s", c.preset.Name, what+" ("+preset.Noun(m.Key)+")")
	}
	return "", ""
}

// keyRule: the framework's key moved for a reason its files show.
func keyRule(c *causeInput) (string, string) {
	name := c.use.Preset
	switch c.use.moved {
	case movedNumba:
		return "the source changed: Numba keys its index on the source file's time and size, and a source touched, edited or copied without its times (cp -p, rsync -t keep them) since the warm-up makes it compile every function of that file again",
			name + " compiled again: source time (Numba's index is keyed on the source file's time)"
	case movedTriton:
		return "the same kernels compiled under new hashes: Triton's key holds the kernel's options (num_warps, num_stages, constants), its source and the environment's TRITON_* variables; one of them differs from the warm-up's",
			name + " compiled again: Triton's hash over the options moved"
	case movedJAX:
		return "the same programs compiled under new keys: JAX's key holds the device topology (how many devices, of what kind) and the compile options; a job of another shape than the warm-up's misses every entry",
			name + " compiled again: JAX's key holds the topology"
	case movedVLLMRank:
		return "new rank directories beside the loaded ones: vLLM keeps one cache per rank (rank_R_D), so a job of another parallel layout (tensor or data parallel size) than the warm-up's compiles again",
			name + " compiled again: vLLM's rank directories"
	case movedVLLMHash:
		return "the same pieces compiled under a new hash: vLLM's compile hash holds its configuration and the model's code (its log's `torch.compile cache factors` line says which)",
			name + " compiled again: vLLM's compile hash moved"
	}
	return "", ""
}
