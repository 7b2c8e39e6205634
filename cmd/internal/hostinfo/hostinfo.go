// Package hostinfo describes this machine, for the front ends (cmd/):
// operating system, CPU architecture, model and feature flags, and the GPU
// when one is visible. Compiled kernels are valid only on matching
// hardware and software, so the packer records this and the loader
// compares it (load's gpu.go, by preset's reuse rules). Toolchain reads the
// versions the frameworks' caches key on (Python's packages, Inductor's
// C++ compiler, the CUDA runtime) without importing a framework. It only
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

	"github.com/kbundle/kbundle/bundle"
)

// The keys of the description are the format's (docs/FORMAT.md).
const (
	osKey         = bundle.MetaHostOS
	archKey       = bundle.MetaHostArch
	kernelKey     = bundle.MetaHostKernel
	cpuModelKey   = bundle.MetaCPUModel
	cpuFlagsKey   = bundle.MetaCPUFlags
	gpuModelKey   = bundle.MetaGPUModel
	gpuComputeKey = bundle.MetaGPUCompute
	gpuDriverKey  = bundle.MetaGPUDriver
)

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
