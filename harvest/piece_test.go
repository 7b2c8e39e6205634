package harvest

import (
	"bytes"
	"testing"
)

// TestPieces: a piece goes compressed when that is shorter, raw when not,
// and comes back exactly; a piece of another length or kind, or a frame
// that decompresses to more or fewer bytes than expected, is refused.
func TestPieces(t *testing.T) {
	text := bytes.Repeat([]byte("kernel body "), 4096) // compresses well
	random := unitBytes(1, 4096)[:2048]                // the random half: does not
	for _, c := range []struct {
		name string
		raw  []byte
		kind byte
	}{{"compressible", text, pieceZstd}, {"random", random, pieceRaw}, {"one byte", []byte{7}, pieceRaw}} {
		msg := packPiece(nil, c.raw)
		if msg[0] != c.kind {
			t.Errorf("%s: kind %d, want %d (%d bytes for %d)", c.name, msg[0], c.kind, len(msg), len(c.raw))
		}
		if len(msg) > len(c.raw)+1 {
			t.Errorf("%s: %d bytes for %d", c.name, len(msg), len(c.raw))
		}
		got, err := unpackPiece(make([]byte, len(c.raw)), msg)
		if err != nil || !bytes.Equal(got, c.raw) {
			t.Errorf("%s: round trip: %v", c.name, err)
		}
		if _, err := unpackPiece(make([]byte, len(c.raw)+1), msg); err == nil {
			t.Errorf("%s: accepted as one byte longer", c.name)
		}
		if len(c.raw) > 1 {
			if _, err := unpackPiece(make([]byte, len(c.raw)-1), msg); err == nil {
				t.Errorf("%s: accepted as one byte shorter", c.name)
			}
		}
	}
	for _, bad := range [][]byte{nil, {2, 1, 2}, {pieceZstd, 1, 2, 3}} {
		if _, err := unpackPiece(make([]byte, 3), bad); err == nil {
			t.Errorf("message %v accepted", bad)
		}
	}
}

// FuzzUnpackPiece: whatever a leader sends, rank 0 returns exactly the
// expected length or an error, and never panics.
func FuzzUnpackPiece(f *testing.F) {
	f.Add(packPiece(nil, bytes.Repeat([]byte("ab"), 100)), 200)
	f.Add(packPiece(nil, []byte{1, 2, 3}), 3)
	f.Add([]byte{pieceZstd, 0x28, 0xb5, 0x2f, 0xfd}, 10)
	f.Fuzz(func(t *testing.T, msg []byte, want int) {
		if want < 0 || want > 1<<20 {
			return
		}
		out, err := unpackPiece(make([]byte, want), msg)
		if err == nil && len(out) != want {
			t.Fatalf("%d bytes, want %d", len(out), want)
		}
	})
}
