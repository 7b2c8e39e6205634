package version

import (
	"regexp"
	"testing"
)

func TestString(t *testing.T) {
	// A test binary has no linked version and no module version.
	if got := String(); !regexp.MustCompile(`^devel(-[0-9a-f]{12})?$`).MatchString(got) {
		t.Errorf("String() = %q without a linked version, want devel or devel-COMMIT", got)
	}
	defer func(old string) { linked = old }(linked)
	linked = "0.1.0+g2e94ddbe12d5.dirty"
	if got := String(); got != linked {
		t.Errorf("String() = %q, want the linked %q", got, linked)
	}
}
