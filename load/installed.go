package load

import (
	"path/filepath"
	"strings"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/warmup"
)

// recordInfo is what this node's install record says besides the tree.
func (l *leader) recordInfo(presets []*warmup.Preset) bundle.RecordInfo {
	info := bundle.RecordInfo{Job: l.plan.Job, Host: l.plan.Host, Bundle: l.bundlePath}
	if names := presetNames(presets); names != "" {
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
