package load

import (
	"fmt"
	"strings"

	"github.com/kbundle/kbundle/bundle"
)

// compared are the host keys whose difference makes compiled kernels
// suspect (the kernel version is recorded but not compared).
var compared = []string{bundle.MetaHostOS, bundle.MetaHostArch, bundle.MetaCPUModel, bundle.MetaCPUFlags,
	bundle.MetaGPUModel, bundle.MetaGPUCompute, bundle.MetaGPUDriver}

// diffHost lists how this machine (local) differs from a recorded
// description in ways that make compiled kernels suspect, one readable item
// a key, in a stable order: "host.cpu_model: warmed on X, here Y". A key
// missing from either side is unknown, not a difference (an old bundle; a
// load step that cannot see the GPUs). CPU flags differ only when the
// warm-up machine had flags this one lacks: kernels may use them; extra
// flags here (a newer microcode or kernel) change nothing.
func diffHost(recorded, local map[string]string) []string {
	var d []string
	for _, k := range compared {
		rv, ok := recorded[k]
		lv, lok := local[k]
		if !ok || !lok || rv == lv {
			continue
		}
		if k == bundle.MetaCPUFlags {
			if missing := lacking(rv, lv); len(missing) > 0 {
				d = append(d, fmt.Sprintf("%s: this node lacks %s", k, strings.Join(missing, " ")))
			}
			continue
		}
		d = append(d, fmt.Sprintf("%s: warmed on %q, here %q", k, rv, lv))
	}
	return d
}

// lacking lists the space-separated words of want missing from have (at
// most 8, then how many more).
func lacking(want, have string) []string {
	h := map[string]bool{}
	for _, f := range strings.Fields(have) {
		h[f] = true
	}
	var out []string
	n := 0
	for _, f := range strings.Fields(want) {
		if !h[f] {
			if n++; n <= 8 {
				out = append(out, f)
			}
		}
	}
	if n > 8 {
		out = append(out, fmt.Sprintf("and %d more", n-8))
	}
	return out
}
