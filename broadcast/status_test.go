package broadcast

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
)

func TestStatusRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		s    status
	}{
		{"ok", status{chunk: 4096, size: 1 << 40, prelude: 1 << 20, digest: bundle.Digest{1, 2, 3}}},
		{"failed", *failure(errors.Join(ErrNoBundle, fs.ErrNotExist), 3, 2)},
		{"long reason", status{failed: true, reason: strings.Repeat("é", MaxReason)}},
		{"empty", status{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.s.encode()
			if len(b) != statusLen {
				t.Fatalf("%d bytes", len(b))
			}
			got, err := decodeStatus(b)
			if err != nil {
				t.Fatal(err)
			}
			want := c.s
			want.reason = truncate(want.reason, MaxReason)
			if *got != want {
				t.Fatalf("got %+v, want %+v", *got, want)
			}
			if !bytes.Equal(got.encode(), b) {
				t.Fatal("re-encoding differs")
			}
		})
	}
}

func TestStatusErrorMatches(t *testing.T) {
	s := failure(&bundle.Error{File: "f", Err: bundle.ErrUntrusted, Msg: "mode 0666"}, 0, 1, ErrNoBundle)
	got, err := decodeStatus(s.encode())
	if err != nil {
		t.Fatal(err)
	}
	e := got.err()
	for _, w := range []error{ErrNoBundle, bundle.ErrUntrusted} {
		if !errors.Is(e, w) {
			t.Errorf("%v does not match %v", e, w)
		}
	}
	for _, w := range []error{ErrTransfer, bundle.ErrChecksum, fs.ErrNotExist} {
		if errors.Is(e, w) {
			t.Errorf("%v matches %v", e, w)
		}
	}
}

func TestDecodeStatusRejects(t *testing.T) {
	good := (&status{chunk: 10, size: 100, prelude: bundle.MinPrelude}).encode()
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:10] }},
		{"magic", func(b []byte) []byte { b[0] = 'x'; return b }},
		{"flag", func(b []byte) []byte { b[4] = 2; return b }},
		{"mask", func(b []byte) []byte { b[11] = 0x80; return b }},
		{"reason length", func(b []byte) []byte { b[53] = 0xff; return b }},
		{"chunk zero", func(b []byte) []byte { clear(b[20:28]); return b }},
		{"size", func(b []byte) []byte { b[35] = 0xff; return b }},
		{"prelude long", func(b []byte) []byte { b[56] = 101; return b }},
		{"prelude short", func(b []byte) []byte { b[56] = bundle.MinPrelude - 1; return b }},
		{"prelude none", func(b []byte) []byte { b[56] = 0; return b }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.edit(bytes.Clone(good))
			if _, err := decodeStatus(b); !errors.Is(err, ErrStatus) {
				t.Fatalf("got %v, want ErrStatus", err)
			}
		})
	}
}

func FuzzDecodeStatus(f *testing.F) {
	f.Add((&status{chunk: 10, size: 100, prelude: bundle.MinPrelude}).encode())
	f.Add((&status{chunk: 10, size: 100, prelude: 5}).encode()) // refused: shorter than a header
	f.Add(failure(ErrNoBundle, 1, 2).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeStatus(b)
		if err != nil {
			return
		}
		again, err := decodeStatus(s.encode())
		if err != nil || *again != *s {
			t.Fatalf("re-decoding %+v gave %+v, %v", *s, again, err)
		}
	})
}

// TestMemorySinkShortPrelude: LoadBundle's sink refuses a prelude that
// cannot hold a header and a trailer (decodeStatus lets an ok status of
// size 0 through) instead of slicing out of range.
func TestMemorySinkShortPrelude(t *testing.T) {
	for _, c := range []struct {
		name    string
		prelude int
		size    int64
	}{
		{"empty bundle", 0, 0},
		{"short", 5, 100},
		{"longer than the bundle", bundle.MinPrelude, bundle.MinPrelude - 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := new(memorySink).Begin(make([]byte, c.prelude), c.size, bundle.Digest{})
			if !errors.Is(err, ErrStatus) {
				t.Errorf("got %v, want ErrStatus", err)
			}
		})
	}
}

// TestDestinationCrossesRanks: a destination refusal and a full disk keep
// their sentinels across the agreement, so every front end gives them
// the same hint (none: the message says what to do) as a local failure.
func TestDestinationCrossesRanks(t *testing.T) {
	for _, s := range []error{bundle.ErrDestination, bundle.ErrNoSpace} {
		e := &Error{Reason: "x", mask: maskOf(fmt.Errorf("dest: %w", s))}
		if !errors.Is(e, s) || errors.Is(e, ErrNoBundle) {
			t.Errorf("%v: lost across the wire", s)
		}
	}
}
