package hostlist

import "testing"

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"kbn1"}, "kbn1"},
		{[]string{"kbn3", "kbn1", "kbn2", "kbn7"}, "kbn[1-3,7]"},
		{[]string{"n01", "n02", "n10"}, "n[01-02,10]"},
		{[]string{"login", "kbn2", "kbn1"}, "login,kbn[1-2]"},
		{[]string{"a1", "b1", "a2"}, "a[1-2],b1"},
	} {
		if got := Format(c.in); got != c.want {
			t.Errorf("Format(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
