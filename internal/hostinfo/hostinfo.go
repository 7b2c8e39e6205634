// Package hostinfo describes the machine a cache was warmed on: operating
// system, CPU architecture, model and feature flags, and the GPU when one is
// visible. Compiled kernels are valid only on matching hardware and
// software, so the packer records this and the loader compares it. It only
// reads; it never fails a caller: what it cannot learn it leaves out.
package hostinfo

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Keys of the description: the format's, public as bundle.MetaHostOS and
// its neighbours (docs/FORMAT.md). They are spelt out here because bundle
// imports this package (Pack collects the description); keys_test.go
// checks that both spellings agree.
const (
	osKey         = "host.os"
	archKey       = "host.arch"
	kernelKey     = "host.kernel"
	cpuModelKey   = "host.cpu_model"
	cpuFlagsKey   = "host.cpu_flags"
	gpuModelKey   = "gpu.model"
	gpuComputeKey = "gpu.compute_cap"
	gpuDriverKey  = "gpu.driver"
)

// compared are the keys whose difference makes compiled kernels suspect.
var compared = []string{osKey, archKey, cpuModelKey, cpuFlagsKey, gpuModelKey, gpuComputeKey, gpuDriverKey}

// Collect describes this machine.
func Collect() map[string]string {
	m := map[string]string{osKey: runtime.GOOS, archKey: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m[kernelKey] = strings.TrimSpace(string(b))
	}
	model, flags := cpuinfo("/proc/cpuinfo")
	if model != "" {
		m[cpuModelKey] = model
	}
	if flags != "" {
		m[cpuFlagsKey] = flags
	}
	for k, v := range gpu() {
		m[k] = v
	}
	return m
}

// cpuinfo returns the first processor's model name and its sorted flags.
func cpuinfo(path string) (model, flags string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case model == "" && (k == "model name" || k == "cpu model" || k == "CPU part"):
			model = v
		case flags == "" && (k == "flags" || k == "Features"):
			fs := strings.Fields(v)
			sort.Strings(fs)
			flags = strings.Join(fs, " ")
		}
		if model != "" && flags != "" {
			break
		}
	}
	return model, flags
}

// gpu asks nvidia-smi, when present, for the first GPU's model, compute
// capability and driver; it gives up after a few seconds.
func gpu() map[string]string {
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader").Output()
	if err != nil {
		return nil
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	parts := strings.Split(line, ",")
	if len(parts) != 3 {
		return nil
	}
	return map[string]string{
		gpuModelKey:   strings.TrimSpace(parts[0]),
		gpuComputeKey: strings.TrimSpace(parts[1]),
		gpuDriverKey:  strings.TrimSpace(parts[2]),
	}
}

// Diff lists how this machine (local) differs from a recorded
// description in ways that make compiled kernels suspect, one readable item
// a key, in a stable order: "host.cpu_model: warmed on X, here Y". A key
// missing from either side is unknown, not a difference (an old bundle; a
// load step that cannot see the GPUs). CPU flags differ only when the
// warm-up machine had flags this one lacks: kernels may use them; extra
// flags here (a newer microcode or kernel) change nothing.
func Diff(recorded, local map[string]string) []string {
	var d []string
	for _, k := range compared {
		rv, ok := recorded[k]
		lv, lok := local[k]
		if !ok || !lok || rv == lv {
			continue
		}
		if k == cpuFlagsKey {
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
