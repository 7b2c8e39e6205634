package testutil

import (
	"fmt"
	"os"
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
