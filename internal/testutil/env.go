package testutil

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// ReadEnvFixture reads a launcher environment fixture (detect/testdata):
// KEY=VALUE lines; blank lines and lines starting with '#' (citations)
// are skipped.
func ReadEnvFixture(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: line %q is not KEY=VALUE", path, line)
		}
		env[k] = v
	}
	return env, nil
}

// launchPrefixes start the names of the variables that make a process
// believe it runs under a launcher or change kbundle's behaviour.
var launchPrefixes = []string{"SLURM_", "OMPI_", "PMI_", "PMIX_", "PALS_", "PBS_", "HYDRA_", "MPI_LOCAL", "FLUX_", "KBUNDLE_"}

// CleanEnv is this process's environment without the launchers' and
// kbundle's variables (in case the tests themselves run inside an
// allocation), but for the names in keep.
func CleanEnv(keep ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(keep, name) && slices.ContainsFunc(launchPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		env = append(env, kv)
	}
	return env
}
