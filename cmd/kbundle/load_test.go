package main

import (
	"strings"
	"testing"
)

func TestDefaultDest(t *testing.T) {
	for _, c := range []struct {
		to, job string
		want    string // suffix; "" means an error
	}{
		{"/x/dest", "1", "/x/dest"},
		{"/x/de\nst", "1", ""},
		{"/x/\x1b[2Jdest", "1", ""},
		{"", "42", "-42"},
		{"", "../../etc", "-_.._.._etc"},
	} {
		got, err := defaultDest(c.to, c.job)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%q: %q, want an error", c.to, got)
		case c.want != "" && (err != nil || !strings.HasSuffix(got, c.want)):
			t.Errorf("%q %q: %q %v, want ...%s", c.to, c.job, got, err, c.want)
		}
	}
}
