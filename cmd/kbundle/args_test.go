package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestFlagsFirst(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, tc := range []struct{ in, want string }{
		{"kbundle extract F D --force", "kbundle extract --force F D"},
		{"kbundle extract F D -j 2 --json", "kbundle extract -j 2 --json F D"},
		{"kbundle extract F --jobs=2 D", "kbundle extract --jobs=2 F D"},
		{"kbundle info F --json", "kbundle info --json F"},
		{"kbundle ls F -l", "kbundle ls -l F"},
		{"kbundle pack -o x.kb --dir c --exclude *.ptx", "kbundle pack -o x.kb --dir c --exclude *.ptx"},
		{"kbundle info -- -odd --json", "kbundle info -- -odd --json"},
		{"kbundle info F -- -odd", "kbundle info -- F -odd"},
		{"kbundle extract - D --force", "kbundle extract --force - D"},
		{"kbundle extract F D --bogus", "kbundle extract --bogus F D"},
		{"kbundle load --bundle B --preset triton --print-env", "kbundle load --bundle B --preset triton --print-env"},
		// Not reordered: warm (CMD's flags are CMD's), help, unknown commands, no command.
		{"kbundle warm --dir D -- sh -c x --y", "kbundle warm --dir D -- sh -c x --y"},
		{"kbundle warm --dir D sh -x", "kbundle warm --dir D sh -x"},
		{"kbundle help extract", "kbundle help extract"},
		{"kbundle nope F --json", "kbundle nope F --json"},
		{"kbundle --version", "kbundle --version"},
		{"kbundle", "kbundle"},
		// A value flag at the very end keeps its missing value a parse error.
		{"kbundle verify F -j", "kbundle verify -j F"},
	} {
		got := strings.Join(flagsFirst(app, strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// FuzzFlagsFirst: the result is a permutation of the arguments (plus at
// most the "--" already there), the command stays in place, and flags and
// arguments each keep their order.
func FuzzFlagsFirst(f *testing.F) {
	app := newApp(io.Discard, io.Discard)
	for _, s := range []string{"extract F D --force", "info -- -x --json", "pack -o o --dir d", "verify F -j 2 G", "warm -- a -b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := append([]string{"kbundle"}, strings.Fields(s)...)
		out := flagsFirst(app, slices.Clone(in))
		a, b := slices.Clone(in), slices.Clone(out)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			t.Fatalf("%q became %q: not a permutation", in, out)
		}
		if len(in) > 1 && in[1] != out[1] {
			t.Fatalf("%q became %q: the command moved", in, out)
		}
		isFlag := func(x string) bool { return len(x) > 1 && x[0] == '-' }
		var fin, fout []string
		for _, x := range in {
			if isFlag(x) {
				fin = append(fin, x)
			}
		}
		for _, x := range out {
			if isFlag(x) {
				fout = append(fout, x)
			}
		}
		if !slices.Equal(fin, fout) {
			t.Fatalf("%q became %q: flags reordered among themselves", in, out)
		}
	})
}
