package loadcmd

import (
	"testing"
	"time"
)

// TestParseTimeout: a bare number is seconds (U16 of the 2026-12-01 UX
// review: `--timeout 30` and KBUNDLE_TIMEOUT=10 were parse errors), a
// duration keeps its unit, anything negative or unreadable is refused.
func TestParseTimeout(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30", 30 * time.Second, true},
		{"0", 0, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"10m", 10 * time.Minute, true},
		{"1h30m", 90 * time.Minute, true},
		{"-1", 0, false},
		{"-5s", 0, false},
		{"soon", 0, false},
		{"", 0, false},
		{"NaN", 0, false},
		{"1e300", 0, false},
	} {
		got, err := ParseTimeout(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
