package harvest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kbundle/kbundle/broadcast/broadcasttest"
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

// TestRuns: a leader's chosen files go as one run of pieces of the chunk
// size, whatever their sizes (none, under, at and over a piece), and rank
// 0 reads each file where it should start: after a file it left unread
// (content the layer holds already), after one it read in part, and
// after one that shrank on the leader (sent padded with zeros, so that
// its digest fails it alone).
func TestRuns(t *testing.T) {
	const chunk = 7
	dest := t.TempDir()
	sizes := []int{0, 3, 7, 1, 15, 30, 2, 9}
	var files []File
	var choice []int
	want := map[string][]byte{}
	for i, n := range sizes {
		name := fmt.Sprintf("f%d", i)
		b := unitBytes(uint64(i), n)
		if err := os.WriteFile(filepath.Join(dest, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		files, choice, want[name] = append(files, File{Name: name, Size: int64(n)}), append(choice, i), b
	}
	// f4 shrinks to 5 bytes after it was listed: 10 zeros follow them.
	if err := os.Truncate(filepath.Join(dest, "f4"), 5); err != nil {
		t.Fatal(err)
	}
	want["f4"] = append(want["f4"][:5:5], make([]byte, 10)...)
	total := 0
	for _, n := range sizes {
		total += n
	}
	var pieces int
	got := map[string][]byte{}
	world := broadcasttest.World(0, 1)
	errs := broadcasttest.OnEveryRank(world, func(c *broadcasttest.Comm) error {
		if c.Rank() == 1 {
			out := newRunSender(c, chunk, func() { pieces++ })
			for _, i := range choice {
				if err := out.add(Plan{Dest: dest}, files[i], ""); err != nil {
					return err
				}
			}
			return out.flush()
		}
		rr := newRunReader(c, 1, files, choice, chunk)
		for _, i := range choice {
			f := files[i]
			err := rr.file(f, func(r io.Reader) error {
				switch f.Name {
				case "f5": // the layer holds it: nothing read
					return nil
				case "f6": // read in part, then an error
					b := make([]byte, 1)
					_, err := io.ReadFull(r, b)
					got[f.Name] = b
					return errors.Join(err, errors.New("f6 failed"))
				}
				b, err := io.ReadAll(r)
				got[f.Name] = b
				return err
			})
			if (err != nil) != (f.Name == "f6") {
				return fmt.Errorf("%s: %v", f.Name, err)
			}
		}
		if n, err := rr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			return fmt.Errorf("after the last file: %d, %v; want the run's end", n, err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if want := (total + chunk - 1) / chunk; pieces != want {
		t.Errorf("%d pieces for %d bytes, want %d", pieces, total, want)
	}
	want["f6"] = want["f6"][:1]
	delete(want, "f5")
	for name, b := range want {
		if !bytes.Equal(got[name], b) && !(len(b) == 0 && len(got[name]) == 0) {
			t.Errorf("%s: got %x, want %x", name, got[name], b)
		}
	}
}
