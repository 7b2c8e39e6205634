package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/hostinfo"
	"github.com/kbundle/kbundle/preset"
)

// pythonName matches a command that is a Python interpreter (python,
// python3, python3.11, a venv's bin/python).
var pythonName = regexp.MustCompile(`^python[0-9.]*$`)

// warmPython is the interpreter whose versions warm records: $KBUNDLE_PYTHON,
// else CMD itself when it is a Python, else python3 on PATH ("").
func warmPython(argv []string) string {
	if v := os.Getenv("KBUNDLE_PYTHON"); v != "" {
		return v
	}
	if len(argv) > 0 && pythonName.MatchString(filepath.Base(argv[0])) {
		return argv[0]
	}
	return ""
}

// toolchainMeta is the toolchain to record in a bundle for presets
// (preset.ToolchainKeys: with no preset, every key), read with python
// ("": $KBUNDLE_PYTHON, else python3 on PATH); err says why Python could
// not be asked (what else was read is returned).
func toolchainMeta(presets []*preset.Preset, python string) (map[string]string, error) {
	if python == "" {
		python = os.Getenv("KBUNDLE_PYTHON")
	}
	return hostinfo.Toolchain(python, os.Getenv, preset.ToolchainKeys(presets))
}

// toolchainSummary is the toolchain recorded, for a person: "Python
// 3.11.7 (/usr/bin/python3), numba 0.60.0, …".
func toolchainSummary(m map[string]string) string {
	var parts []string
	for _, r := range []string{bundle.MetaPython, bundle.MetaNumba, bundle.MetaLLVMLite, bundle.MetaNumbaCUDA, bundle.MetaJAX,
		bundle.MetaJAXLib, bundle.MetaTorch, bundle.MetaTorchCUDA, bundle.MetaTriton, bundle.MetaPyOpenCL, bundle.MetaCuPy,
		bundle.MetaCXXVersion, bundle.MetaCUDARuntime, bundle.MetaROCm} {
		v, ok := m[r]
		if !ok {
			continue
		}
		s := preset.Noun(r) + " " + v
		if r == bundle.MetaPython && m[bundle.MetaPythonPath] != "" {
			s += " (" + m[bundle.MetaPythonPath] + ")"
		}
		if r == bundle.MetaCXXVersion {
			s = m[bundle.MetaCXX] + ": " + v
		}
		parts = append(parts, s)
	}
	return safe(strings.Join(parts, ", "))
}
