package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil/tree"
)

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"triton/ab/k.ptx":      "triton/ab/k.ptx",
		"ünïcödé κ.json":       "ünïcödé κ.json",
		"with space":           "with space",
		"a\nb":                 `"a\nb"`,
		"e\x1b[2Jvil":          `"e\x1b[2Jvil"`,
		"x\u202egnp.sh":        `"x\u202egnp.sh"`,
		"bad\xffutf8":          `"bad\xffutf8"`,
		"tab\there":            `"tab\there"`,
		"title\x1b]0;owned\a!": `"title\x1b]0;owned\a!"`,
		`"a\nb"`:               `"\"a\\nb\""`,
	} {
		if got := safe(in); got != want {
			t.Errorf("safe(%q) = %s, want %s", in, got, want)
		}
	}
	if got := cut(strings.Repeat("é", 120), 100); len([]rune(got)) != 100 || !strings.HasSuffix(got, "…") {
		t.Errorf("cut split badly: %q", got)
	}
}

// TestHostileNamesEscaped packs names and a directory path holding
// control characters and checks that ls, ls -l, info and pack's own
// summary print them escaped (W9 of the security review): no raw escape
// sequence, no name split over two lines.
func TestHostileNamesEscaped(t *testing.T) {
	root := filepath.Join(t.TempDir(), "dir\x1b[2J")
	tree.Write(t, root, tree.Spec{
		"a\nb":          {Data: "x"},
		"e\x1b[2Jvil":   {Data: "y"},
		"x\u202egnp.sh": {Data: "z"},
	})
	out := filepath.Join(t.TempDir(), "h.kbundle")
	for _, args := range [][]string{
		{"pack", "--dir", root, "-o", out},
		{"ls", out}, {"ls", "-l", out}, {"info", out},
	} {
		var so, se bytes.Buffer
		if code := run(append([]string{"kbundle"}, args...), &so, &se); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, se.String())
		}
		all := so.String() + se.String()
		if strings.ContainsAny(all, "\x1b\u202e") {
			t.Errorf("%v printed a raw control character:\n%q", args, all)
		}
		if args[0] == "ls" && (!strings.Contains(all, `"a\nb"`) || !strings.Contains(all, `"e\x1b[2Jvil"`)) {
			t.Errorf("%v: names not quoted:\n%s", args, all)
		}
		if args[0] == "info" && !regexp.MustCompile(`(?m)^origin: +"`).MatchString(all) {
			t.Errorf("info: origin not quoted:\n%s", all)
		}
	}
}

// TestProgressFullOnce: with the cumulative Progress(done, total) of
// Pack, Verify and Extract, the display reaches 100 % exactly once and
// never goes beyond it.
func TestProgressFullOnce(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	spec := tree.Spec{}
	for i := range 40 {
		spec[filepath.Join("d", string(rune('a'+i%26)), strings.Repeat("k", 1+i%5))] = tree.File{Data: strings.Repeat(string(rune('A'+i%26)), 50000+i*1000)}
	}
	tree.Write(t, src, spec)
	out := filepath.Join(t.TempDir(), "p.kbundle")
	check := func(what string, op func(progress func(done, total int64)) error) {
		t.Helper()
		var buf bytes.Buffer
		p := &progress{w: &buf, verb: what, tty: true, every: 0, start: time.Now()}
		var last int64
		if err := op(func(done, total int64) {
			if done < last || done > total {
				t.Errorf("%s: progress %d of %d after %d", what, done, total, last)
			}
			last = done
			p.update(done, total)
		}); err != nil {
			t.Fatal(err)
		}
		p.done()
		if n := strings.Count(buf.String(), "100%"); n != 1 {
			t.Errorf("%s: 100%% shown %d times:\n%q", what, n, buf.String())
		}
		if strings.Contains(buf.String(), "101%") {
			t.Errorf("%s: beyond 100%%", what)
		}
	}
	check("packing", func(pr func(int64, int64)) error {
		_, err := bundle.Pack(context.Background(), src, out, &bundle.PackOptions{SegmentSize: bundle.MinSegmentSize, Jobs: 2, Progress: pr})
		return err
	})
	rc, err := bundle.Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for _, deep := range []bool{false, true} {
		check("verifying", func(pr func(int64, int64)) error {
			return rc.Verify(context.Background(), &bundle.VerifyOptions{Deep: deep, Jobs: 2, Progress: pr})
		})
	}
	check("extracting", func(pr func(int64, int64)) error {
		_, err := rc.Extract(context.Background(), filepath.Join(t.TempDir(), "x"), &bundle.ExtractOptions{Jobs: 2, Progress: pr})
		return err
	})

	// In a batch log: a line per interval, none on a terminal's behalf.
	var buf bytes.Buffer
	p := &progress{w: &buf, verb: "packing", every: time.Nanosecond, start: time.Now()}
	for i := int64(1); i <= 4; i++ {
		time.Sleep(time.Millisecond)
		p.update(i*25, 100)
	}
	p.done()
	if n := strings.Count(buf.String(), "\n"); n != 4 || strings.Contains(buf.String(), "\r") ||
		!strings.Contains(buf.String(), "kbundle: packing: 50%, 50 B of 100 B after") {
		t.Errorf("log lines:\n%s", buf.String())
	}
}
