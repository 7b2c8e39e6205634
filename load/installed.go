package load

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/preset"
)

// recordInfo is what this node's install record says besides the tree.
func (l *leader) recordInfo(presets []*preset.Preset) bundle.RecordInfo {
	info := bundle.RecordInfo{Job: l.plan.Job, Host: l.plan.Host, Bundle: l.bundlePath}
	if l.skip != nil {
		info.Filter = filterName(l.target())
	}
	if names := preset.Names(presets); names != "" {
		info.Presets = strings.Split(names, ",")
	}
	return info
}

// absPath is p made absolute, or p.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// setInfoLen is the size of the one broadcast in which rank 0 tells the
// leaders what set it loads: a flag, the content digest, the presets, the
// bundle's path and the names of its layers above the base, each
// length-prefixed.
const setInfoLen = 1 + 16 + 2 + maxPresetList + 2 + 4096 + 2 + maxLayerList + 1

// maxLayerList bounds the layer names rank 0 shares: bundle.MaxLayers
// names of 30 bytes and their commas.
const maxLayerList = bundle.MaxLayers * 31

// setCheckLen is the size of the set check's broadcast: the set info,
// then the base's stream status (broadcast.Announce), which its stream
// then leaves out (issue 31: a round trip less).
const setCheckLen = setInfoLen + broadcast.StatusLen

// setInfo is what rank 0 read from the bundle's header and index.
type setInfo struct {
	ok      bool // rank 0 opened the bundle and chose its presets
	content bundle.Digest
	presets string // comma-separated names
	path    string // absolute ("" when too long to send)
	layers  string // comma-separated names in bundle.LayerDir(path), in order
	gpu     bool   // the set holds entries of GPU architectures (preset.HasGPUUnits)
}

func (s *setInfo) encode() []byte {
	b := make([]byte, 0, setInfoLen)
	if s.ok {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = append(b, s.content[:]...)
	p, f := s.presets, s.path
	if len(p) > maxPresetList {
		p = "" // cannot be: preset names are short
	}
	if len(f) > 4096 {
		f = ""
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(p)))
	b = append(b, p...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(f)))
	b = append(b, f...)
	ls := s.layers
	if len(ls) > maxLayerList {
		ls = "" // cannot be: OpenSet refuses more layers
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(ls)))
	b = append(b, ls...)
	b = b[:setInfoLen]
	if s.gpu {
		b[setInfoLen-1] = 1 // the last byte, which the fields above never reach
	}
	return b
}

func decodeSetInfo(b []byte) *setInfo {
	s := &setInfo{ok: b[0] == 1, gpu: b[setInfoLen-1] == 1}
	copy(s.content[:], b[1:17])
	n := int(binary.LittleEndian.Uint16(b[17:]))
	if n > maxPresetList {
		return &setInfo{}
	}
	s.presets = string(b[19 : 19+n])
	r := b[19+n:]
	m := int(binary.LittleEndian.Uint16(r))
	if m > len(r)-2 {
		return &setInfo{}
	}
	s.path = string(r[2 : 2+m])
	r = r[2+m:]
	if k := int(binary.LittleEndian.Uint16(r)); k <= maxLayerList && k <= len(r)-2 {
		s.layers = string(r[2 : 2+k])
	}
	return s
}

// checkHeld runs on every leader before the stream: rank 0 (which has
// opened the bundle, reading its header and index only) sends what set it
// loads, and each leader says whether its Dest already holds it,
// unchanged since its install (docs/FORMAT.md, "Install record"). held:
// this node keeps its Dest as it is. refuse: this node's Dest holds a tree
// kbundle installed that changed since, which only --force replaces. A
// returned error matching broadcast.ErrComm is local.
func (l *leader) checkHeld(group broadcast.Comm, set *bundle.OpenedSet, srcErr error) (held bool, refuse, err error) {
	buf := make([]byte, setCheckLen)
	if group.Rank() == 0 {
		var base *bundle.Reader
		if set != nil {
			base = set.Read[0].Reader
		}
		t := time.Now()
		status, prelude := broadcast.Announce(base, srcErr, l.plan.ChunkSize)
		l.stats.Read += time.Since(t)
		l.basePrelude = prelude
		si := &setInfo{path: l.bundlePath}
		if set != nil {
			if ps, perr := l.choosePresets(set.Read[0].Meta()); perr == nil {
				si.ok, si.content, si.presets = true, set.ContentDigest(bundle.CacheUnit), preset.Names(ps)
				l.presets = ps
			}
			var names []string
			for _, ly := range set.Layers[1:] {
				names = append(names, filepath.Base(ly.Path))
			}
			si.layers = strings.Join(names, ",")
			var all []string
			for _, e := range set.Merged(bundle.CacheUnit) {
				all = append(all, e.Name)
			}
			si.gpu = preset.HasGPUUnits(all)
		}
		buf = append(si.encode(), status...)
	}
	if err := group.Bcast(buf, 0); err != nil {
		return false, nil, commErr("set check", err)
	}
	l.baseStatus = buf[setInfoLen:]
	si := decodeSetInfo(buf[:setInfoLen])
	if group.Rank() != 0 {
		l.bundlePath = si.path
	}
	if !si.ok {
		return false, nil, nil // rank 0's failure is announced by the stream
	}
	l.layerPaths = nil
	if si.layers != "" {
		for _, n := range strings.Split(si.layers, ",") {
			l.layerPaths = append(l.layerPaths, filepath.Join(bundle.LayerDir(si.path), n))
		}
	}
	l.content, l.setPresets, l.setSeen = si.content, si.presets, true
	l.gpuUnits = si.gpu
	l.sum.ContentDigest = bundle.FormatDigest(si.content)
	held, refuse = holds(absPath(l.plan.Dest), si.content, si.presets, l.plan.Force, l.target)
	return held, refuse, nil
}

// holds reports whether dest holds the set of content digest want with
// the presets named, unchanged since its install; or why it is refused
// without force (a tree kbundle installed that changed since). Anything
// else (no record, an older kbundle's marker, another set) is Stage's to
// judge by the usual rules. A tree installed whole holds the set whatever
// this node's GPU; one installed for a GPU architecture (its record names
// the filter and the set's digest) holds it for that architecture, or
// when target, asked only then, sees no GPU (the tree was filtered for
// this node's when a step saw it).
func holds(dest string, want bundle.Digest, presets string, force bool, target func() string) (bool, error) {
	rec, err := bundle.ReadInstallRecord(dest)
	if err != nil || rec.Dest != dest {
		return false, nil // the relocation named another place: not this set as installed here
	}
	ch, err := bundle.CompareTree(dest, rec)
	if err != nil {
		return false, nil
	}
	if !ch.Same() {
		if force {
			return false, nil
		}
		return false, &bundle.Error{File: dest, Err: bundle.ErrChanged, Msg: fmt.Sprintf(
			"kbundle installed it (content digest %s) and its tree changed since (%s entries: the job compiled more)", rec.ContentDigest, ch)}
	}
	set := rec.ContentDigest
	if rec.SetContentDigest != "" {
		set = rec.SetContentDigest
	}
	if set != bundle.FormatDigest(want) || strings.Join(rec.Presets, ",") != presets {
		return false, nil
	}
	if rec.Skipped == 0 {
		return true, nil
	}
	t := target()
	return t == "" || rec.Filter == filterName(t), nil
}
