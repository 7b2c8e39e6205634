// Package hostinfo describes the machine a cache was warmed on: operating
// system, CPU architecture, model and feature flags, and the GPU when one is
// visible. Compiled kernels are valid only on matching hardware and
// software, so the packer records this and the loader compares it. It only
// reads; it never fails a caller: what it cannot learn it leaves out.
package hostinfo

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Keys of the description. All are optional.
const (
	OS          = "host.os"
	Arch        = "host.arch"
	Kernel      = "host.kernel"
	CPUModel    = "host.cpu_model"
	CPUFlags    = "host.cpu_flags"
	GPUModel    = "gpu.model"
	GPUCompute  = "gpu.compute_cap"
	GPUDriver   = "gpu.driver"
	hostKeyPref = "host."
	gpuKeyPref  = "gpu."
)

// compared are the keys whose difference makes compiled kernels suspect.
var compared = []string{OS, Arch, CPUModel, CPUFlags, GPUModel, GPUCompute, GPUDriver}

// Collect describes this machine.
func Collect() map[string]string {
	m := map[string]string{OS: runtime.GOOS, Arch: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m[Kernel] = strings.TrimSpace(string(b))
	}
	model, flags := cpuinfo("/proc/cpuinfo")
	if model != "" {
		m[CPUModel] = model
	}
	if flags != "" {
		m[CPUFlags] = flags
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
		GPUModel:   strings.TrimSpace(parts[0]),
		GPUCompute: strings.TrimSpace(parts[1]),
		GPUDriver:  strings.TrimSpace(parts[2]),
	}
}

// Diff lists the compared keys on which a recorded description and this
// machine's differ, in a stable order. A key missing from recorded is not a
// difference (old bundles, hosts without a GPU at warm-up time).
func Diff(recorded, local map[string]string) []string {
	var d []string
	for _, k := range compared {
		rv, ok := recorded[k]
		if !ok {
			continue
		}
		if rv != local[k] {
			d = append(d, k)
		}
	}
	return d
}

// IsHostKey reports whether a metadata key belongs to this package.
func IsHostKey(k string) bool {
	return strings.HasPrefix(k, hostKeyPref) || strings.HasPrefix(k, gpuKeyPref)
}
