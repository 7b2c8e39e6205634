package bundle

import "testing"

// TestPrintable: names and metadata with control characters, invalid
// UTF-8 or bidi overrides are printed quoted (W9); ordinary ones as they are.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"triton/ab12/k.json":              "triton/ab12/k.json",
		"é ü 名前 with spaces":              "é ü 名前 with spaces",
		"-rf":                             "-rf",
		"\x1b[2J\x1b[1;31mEVIL\x1b[0m":    `"\x1b[2J\x1b[1;31mEVIL\x1b[0m"`,
		"a\nb":                            `"a\nb"`,
		"x\u202egnp.sh":                   `"x\u202egnp.sh"`,
		"a\xffb":                          `"a\xffb"`,
		"tab\there":                       `"tab\there"`,
		`"quoted"`:                        `"\"quoted\""`,
		"/tmp/x\x1b]0;owned\x07\nfake: y": `"/tmp/x\x1b]0;owned\a\nfake: y"`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %s, want %s", in, got, want)
		}
	}
}
