package bundle

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// In a group's shared directory (group-writable, setgid) the layer
// directory is made group-writable and setgid too, so that the other
// members can add their layers; elsewhere it is 0755.
func TestLayerDirMode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parent fs.FileMode
		want   fs.FileMode
	}{
		{"private", 0o700, 0o755},
		{"group set", 0o775 | fs.ModeSetgid, 0o775 | fs.ModeSetgid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "set")
			os.Mkdir(dir, 0o700)
			if err := os.Chmod(dir, tc.parent); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "cache.kbundle")
			writeLayer(t, path, map[string]string{"a": "1"})
			writeLayer(t, path, map[string]string{"b": "2"})
			fi, err := os.Stat(LayerDir(path))
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() & (fs.ModePerm | fs.ModeSetgid); got != tc.want {
				t.Errorf("%s is %v, want %v", LayerDir(path), got, tc.want)
			}
		})
	}
}

// Two writers that list the layer directory before either links (as two
// nodes do at the same moment, or with a listing their client cached)
// get two numbers: the claim of a number, not the layer's name (which
// holds its content digest), is what link(2) makes exclusive.
func TestWriteLayerConcurrentNumbers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.kbundle")
	writeLayer(t, path, map[string]string{"base": "0"})
	var other *Published
	layerListed = func() {
		layerListed = nil // A has listed: B writes and publishes now
		other = writeLayer(t, path, map[string]string{"b": "from B"})
	}
	t.Cleanup(func() { layerListed = nil })
	mine := writeLayer(t, path, map[string]string{"a": "from A"})
	if other == nil || mine.Seq == other.Seq {
		t.Fatalf("A published %s, B %v: one number each wanted", mine.Path, other)
	}
	layers, _ := ListLayers(path, 0)
	if len(layers) != 2 || layers[0].Seq != 1 || layers[1].Seq != 2 || layers[0].Path != other.Path {
		t.Errorf("layers %v, want B's as 1, A's as 2", layers)
	}
	claims, _ := filepath.Glob(LayerDir(path) + "/.*.claim")
	temps, _ := filepath.Glob(filepath.Dir(path) + "/" + tempTag + "*")
	if len(claims) != 2 || len(temps) != 0 {
		t.Errorf("claims %q, temporaries %q: want one claim per layer and no temporary", claims, temps)
	}
}
