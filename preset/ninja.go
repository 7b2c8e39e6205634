package preset

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrNinjaFile is wrapped by the ninja relocation when a .ninja_log or
// .ninja_deps cannot be parsed or is larger than maxNinjaFile.
var ErrNinjaFile = errors.New("bad ninja file")

// maxNinjaFile bounds a build.ninja, .ninja_log or .ninja_deps read into
// memory. An extension's are a few KiB; FlashInfer's largest a few MiB.
const maxNinjaFile = 64 << 20

// relocateAll runs several relocations in order.
func relocateAll(fns ...func(dir, dest, origin string) error) func(dir, dest, origin string) error {
	return func(dir, dest, origin string) error {
		for _, f := range fns {
			if err := f(dir, dest, origin); err != nil {
				return err
			}
		}
		return nil
	}
}

// relocateNinja returns the relocation of the ninja build directories
// under DIR/subdir (PyTorch C++ extensions, FlashInfer). Ninja rebuilds
// an output when it is older than an input, when its command (hashed in
// .ninja_log) changed, or when .ninja_log or .ninja_deps has no record of
// it under the path build.ninja names; FlashInfer names every output by
// absolute path under the cache, so a cache that moved would rebuild
// everything.
//
// Where origin is known and is not dest, every build.ninja (and other
// *.ninja file) has origin rewritten to dest (in ninja's escaping), every
// .ninja_log entry's output path likewise, with the command hash
// recomputed from the rewritten build.ninja in the same directory (kept
// as it was where kbundle cannot evaluate the command the way ninja does:
// that one output is rebuilt), and every .ninja_deps path record. Each
// rewritten file keeps its mode and its modification time, to the
// nanosecond, and so does its directory: ninja compares mtimes. Files
// that name no path under origin are not touched. An unknown origin
// rewrites nothing.
func relocateNinja(subdir string) func(dir, dest, origin string) error {
	return func(dir, dest, origin string) error {
		root, dest, origin, err := relocationRoot(dir, dest, origin, subdir)
		if root == "" || err != nil {
			return err
		}
		r := ninjaRelocation{from: origin, to: dest}
		var logs, deps []string
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			switch name := d.Name(); {
			case name == ".ninja_log":
				logs = append(logs, p)
			case name == ".ninja_deps":
				deps = append(deps, p)
			case strings.HasSuffix(name, ".ninja"):
				return rewriteKeepingTimes(p, func(b []byte) ([]byte, error) { return r.manifest(b), nil })
			}
			return nil
		})
		if err != nil {
			return err
		}
		// The logs last: their hashes come from the rewritten manifests.
		for _, p := range deps {
			if err := rewriteKeepingTimes(p, r.deps); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		for _, p := range logs {
			old, now := ninjaCommands(filepath.Dir(p), r.from, r.to)
			if err := rewriteKeepingTimes(p, func(b []byte) ([]byte, error) { return r.log(b, old, now) }); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	}
}

// ninjaRelocation rewrites paths under from to the same place under to.
type ninjaRelocation struct{ from, to string }

// replacePrefix rewrites every occurrence of from in s that starts a
// path (pathStarts) and is the whole path or followed by a separator
// (from and to given in the file's own escaping).
func replacePrefix(s, from, to string) string {
	if from == "" || !strings.Contains(s, from) {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, from)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(from)
		if pathStarts(s, i) && (end == len(s) || !isPathByte(s[end]) || s[end] == '/') {
			b.WriteString(s[:i])
			b.WriteString(to)
		} else {
			b.WriteString(s[:end])
		}
		s = s[end:]
	}
}

// pathStarts reports whether a path may start at s[i]: at the start, after
// a separator (space, quote, =, :) or after an option letter (-I, -L, -o).
func pathStarts(s string, i int) bool {
	if i == 0 || strings.IndexByte(" \t\n\x00'\"=:|,(", s[i-1]) >= 0 {
		return true
	}
	c := s[i-1]
	letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	return letter && i >= 2 && s[i-2] == '-' && (i == 2 || strings.IndexByte(" \t\n'\"", s[i-3]) >= 0)
}

// isPathByte: a byte that may continue a path component.
func isPathByte(c byte) bool {
	return c != ' ' && c != '\t' && c != '\n' && c != '\x00' && c != ':' && c != '\'' && c != '"' && c != '$' && c != '|'
}

// ninjaEscape escapes a path as build.ninja writes it.
func ninjaEscape(p string) string {
	return strings.NewReplacer("$", "$$", " ", "$ ", ":", "$:").Replace(p)
}

func (r ninjaRelocation) manifest(b []byte) []byte {
	s := string(b)
	out := replacePrefix(s, ninjaEscape(r.from), ninjaEscape(r.to))
	if out == s {
		return b
	}
	return []byte(out)
}

// log rewrites .ninja_log (versions 5 and 6: start, end, mtime, output,
// command hash). old and now map each output, as build.ninja names it
// before and after the rewrite, to its command; an entry's hash is
// replaced only where old reproduces it. Another version is left alone.
func (r ninjaRelocation) log(b []byte, old, now map[string]string) ([]byte, error) {
	header, rest, ok := bytes.Cut(b, []byte("\n"))
	if !ok || (string(header) != "# ninja log v5" && string(header) != "# ninja log v6") {
		return b, nil
	}
	var out bytes.Buffer
	out.Write(header)
	out.WriteByte('\n')
	for _, line := range strings.SplitAfter(string(rest), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 5 {
			return nil, fmt.Errorf("%w: log line %q", ErrNinjaFile, strings.TrimSpace(line))
		}
		// The output's path may stay (relative) while its command names
		// the cache (an -I into it): rehash either way.
		out2 := replacePrefix(f[3], r.from, r.to)
		if cmd, ok := old[f[3]]; ok && strconv.FormatUint(ninjaHash(cmd), 16) == f[4] {
			if c, ok := now[out2]; ok {
				f[4] = strconv.FormatUint(ninjaHash(c), 16)
			}
		}
		f[3] = out2
		out.WriteString(strings.Join(f, "\t"))
		out.WriteByte('\n')
	}
	return out.Bytes(), nil
}

// deps rewrites the path records of .ninja_deps (versions 3 and 4).
func (r ninjaRelocation) deps(b []byte) ([]byte, error) {
	const sig = "# ninjadeps\n"
	if len(b) < len(sig)+4 || string(b[:len(sig)]) != sig {
		return nil, fmt.Errorf("%w: not a deps log", ErrNinjaFile)
	}
	if v := binary.LittleEndian.Uint32(b[len(sig):]); v != 3 && v != 4 {
		return b, nil
	}
	out := append([]byte{}, b[:len(sig)+4]...)
	changed := false
	for p := len(sig) + 4; p < len(b); {
		if len(b)-p < 4 {
			return nil, fmt.Errorf("%w: truncated record", ErrNinjaFile)
		}
		h := binary.LittleEndian.Uint32(b[p:])
		size := int(h & 0x7fffffff)
		if size > len(b)-p-4 || size%4 != 0 {
			return nil, fmt.Errorf("%w: record of %d bytes at %d", ErrNinjaFile, size, p)
		}
		rec := b[p+4 : p+4+size]
		p += 4 + size
		if h&0x80000000 != 0 || size < 4 {
			out = binary.LittleEndian.AppendUint32(out, h)
			out = append(out, rec...)
			continue
		}
		name := string(bytes.TrimRight(rec[:size-4], "\x00"))
		check := rec[size-4:]
		moved := replacePrefix(name, r.from, r.to)
		if moved != name {
			changed = true
		}
		padded := len(moved) + (4-len(moved)%4)%4
		out = binary.LittleEndian.AppendUint32(out, uint32(padded+4))
		out = append(out, moved...)
		out = append(out, make([]byte, padded-len(moved))...)
		out = append(out, check...)
	}
	if !changed {
		return b, nil
	}
	return out, nil
}

// rewriteKeepingTimes replaces the file at p by edit's result, atomically
// (temporary file, rename), keeping its mode and its mtime, and its
// directory's. Nothing is written when edit returns the content
// unchanged.
func rewriteKeepingTimes(p string, edit func([]byte) ([]byte, error)) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.Size() > maxNinjaFile {
		return fmt.Errorf("%w: %s is %d bytes (at most %d)", ErrNinjaFile, p, fi.Size(), maxNinjaFile)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	nb, err := edit(b)
	if err != nil || bytes.Equal(nb, b) {
		return err
	}
	parent := filepath.Dir(p)
	pfi, err := os.Stat(parent)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(parent, ".kbundle-ninja-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(nb); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chtimes(tmp.Name(), time.Time{}, fi.ModTime()); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	return os.Chtimes(parent, time.Time{}, pfi.ModTime())
}

// ninjaHash is ninja's command hash in .ninja_log versions 5 and 6
// (BuildLog::LogEntry::HashCommand): MurmurHash64A, seed 0xDECAFBADDECAFBAD.
func ninjaHash(s string) uint64 {
	const m, r = 0xc6a4a7935bd1e995, 47
	h := uint64(0xDECAFBADDECAFBAD) ^ uint64(len(s))*m
	b := []byte(s)
	for len(b) >= 8 {
		k := binary.LittleEndian.Uint64(b)
		k *= m
		k ^= k >> r
		k *= m
		h ^= k
		h *= m
		b = b[8:]
	}
	if len(b) > 0 {
		for i := len(b) - 1; i >= 0; i-- {
			h ^= uint64(b[i]) << (8 * i)
		}
		h *= m
	}
	h ^= h >> r
	h *= m
	h ^= h >> r
	return h
}

// ninjaCommands evaluates the build.ninja in dir as it was (every path
// under to written back under from: the manifest has been rewritten
// already) and as it is, giving each output's command; nil maps when
// there is none or it uses what this evaluator does not do (include,
// subninja, response files).
func ninjaCommands(dir, from, to string) (old, now map[string]string) {
	b, err := os.ReadFile(filepath.Join(dir, "build.ninja"))
	if err != nil || len(b) > maxNinjaFile {
		return nil, nil
	}
	s := string(b)
	now = evalNinja(s)
	if now == nil {
		return nil, nil
	}
	return evalNinja(replacePrefix(s, ninjaEscape(to), ninjaEscape(from))), now
}

type ninjaRule map[string]string

// evalNinja evaluates the subset of ninja's manifest language that
// PyTorch's and FlashInfer's generators write: top-level bindings, rules,
// build statements with their own bindings, default. It returns each
// explicit output's command as ninja expands it; nil for a manifest it
// cannot evaluate.
func evalNinja(src string) map[string]string {
	src = strings.ReplaceAll(src, "$\r\n", "")
	lines := strings.Split(src, "\n")
	// Join continuation lines ($ at the end, not $$).
	var joined []string
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSuffix(lines[i], "\r")
		for endsWithContinuation(l) && i+1 < len(lines) {
			i++
			l = l[:len(l)-1] + strings.TrimLeft(lines[i], " ")
		}
		joined = append(joined, l)
	}
	file := map[string]string{}
	rules := map[string]ninjaRule{}
	cmds := map[string]string{}
	type edge struct {
		rule     string
		outs     []string
		ins      []string
		bindings map[string]string
	}
	var edges []edge
	for i := 0; i < len(joined); i++ {
		l := joined[i]
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			return nil // an indented line outside a rule or build
		}
		// The indented bindings that follow.
		var body [][2]string
		for i+1 < len(joined) && len(joined[i+1]) > 0 && (joined[i+1][0] == ' ' || joined[i+1][0] == '\t') {
			i++
			k, v, ok := strings.Cut(strings.TrimSpace(joined[i]), "=")
			if !ok {
				if strings.TrimSpace(joined[i]) == "" || strings.HasPrefix(strings.TrimSpace(joined[i]), "#") {
					continue
				}
				return nil
			}
			body = append(body, [2]string{strings.TrimSpace(k), strings.TrimLeft(v, " ")})
		}
		kw, rest, _ := strings.Cut(t, " ")
		switch kw {
		case "rule":
			r := ninjaRule{}
			for _, kv := range body {
				r[kv[0]] = kv[1]
			}
			if _, ok := r["rspfile"]; ok {
				return nil
			}
			rules[strings.TrimSpace(rest)] = r
		case "build":
			head, tail, ok := cutUnescaped(rest, ':')
			if !ok {
				return nil
			}
			outs := ninjaPaths(head, file, true)
			fields := strings.Fields(tail)
			if len(fields) == 0 {
				return nil
			}
			ruleName := fields[0]
			insText := strings.TrimSpace(strings.TrimPrefix(strings.TrimLeft(tail, " "), ruleName))
			ins := ninjaPaths(insText, file, true)
			bind := map[string]string{}
			for _, kv := range body {
				bind[kv[0]] = ninjaExpand(kv[1], func(n string) string {
					if v, ok := bind[n]; ok {
						return v
					}
					return file[n]
				})
			}
			edges = append(edges, edge{rule: ruleName, outs: outs, ins: ins, bindings: bind})
		case "default":
		case "include", "subninja", "pool":
			return nil
		default:
			k, v, ok := strings.Cut(t, "=")
			if !ok {
				return nil
			}
			file[strings.TrimSpace(k)] = ninjaExpand(strings.TrimLeft(v, " "), func(n string) string { return file[n] })
		}
	}
	for _, e := range edges {
		if e.rule == "phony" {
			continue
		}
		r, ok := rules[e.rule]
		if !ok {
			return nil
		}
		var lookup func(n string, depth int) string
		lookup = func(n string, depth int) string {
			switch n {
			case "in":
				return shellJoin(e.ins)
			case "out":
				return shellJoin(e.outs)
			}
			if v, ok := e.bindings[n]; ok {
				return v
			}
			if v, ok := r[n]; ok && depth < 16 {
				return ninjaExpand(v, func(m string) string { return lookup(m, depth+1) })
			}
			return file[n]
		}
		cmd := lookup("command", 0)
		for _, o := range e.outs {
			cmds[o] = cmd
		}
	}
	return cmds
}

func endsWithContinuation(l string) bool {
	n := 0
	for i := len(l) - 1; i >= 0 && l[i] == '$'; i-- {
		n++
	}
	return n%2 == 1
}

// cutUnescaped cuts s at the first c not escaped by $.
func cutUnescaped(s string, c byte) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '$' {
			i++
			continue
		}
		if s[i] == c {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// ninjaPaths splits a build line's path list (explicit paths only: up to
// | or ||), expanding and canonicalising each.
func ninjaPaths(s string, file map[string]string, explicitOnly bool) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, canonNinja(ninjaExpand(cur.String(), func(n string) string { return file[n] })))
			cur.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '$' && i+1 < len(s):
			cur.WriteByte(c)
			cur.WriteByte(s[i+1])
			i++
		case c == ' ':
			flush()
		case c == '|' && explicitOnly:
			flush()
			return out
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}

// ninjaExpand expands $var, ${var} and the escapes $$, $ and $:.
func ninjaExpand(s string, lookup func(string) string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; {
		case c == '$' || c == ' ' || c == ':':
			b.WriteByte(c)
		case c == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			b.WriteString(lookup(s[i+1 : i+end]))
			i += end
		default:
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '-' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			b.WriteString(lookup(s[i:j]))
			i = j - 1
		}
	}
	return b.String()
}

// canonNinja is ninja's CanonicalizePath for the paths these generators
// write: . and .. components and doubled slashes removed.
func canonNinja(p string) string {
	if p == "" {
		return p
	}
	c := path.Clean(p)
	return c
}

// shellJoin is ninja's $in and $out: paths joined by spaces, each
// single-quoted when it holds a character outside [A-Za-z0-9_+,-./].
func shellJoin(ps []string) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		safe := true
		for j := 0; j < len(p); j++ {
			c := p[j]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_+,-./", c) >= 0) {
				safe = false
				break
			}
		}
		if safe {
			q[i] = p
		} else {
			q[i] = "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// relocateHandles returns the relocation of vLLM's compile-cache index
// files under DIR/subdir: each vllm_compile_cache.py (vLLM's
// compilation/backends.py, CompilerManager.save_to_file: a Python literal
// of the graphs' handles) holds, for the standalone Inductor adaptor,
// (key, path) with path the artifact's absolute path under the rank's
// cache directory (compiler_interface.py, InductorStandaloneAdaptor
// .compile and .load), so a cache that moved would load from the old
// path or fail with FileNotFoundError. Every path under origin is
// rewritten to the same place under dest, keeping the file's mtime.
func relocateHandles(subdir string) func(dir, dest, origin string) error {
	return func(dir, dest, origin string) error {
		root, dest, origin, err := relocationRoot(dir, dest, origin, subdir)
		if root == "" || err != nil {
			return err
		}
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() || d.Name() != "vllm_compile_cache.py" {
				return err
			}
			return rewriteKeepingTimes(p, func(b []byte) ([]byte, error) {
				s := string(b)
				if out := replacePrefix(s, origin, dest); out != s {
					return []byte(out), nil
				}
				return b, nil
			})
		})
	}
}

// relocationRoot is where a relocation of subdir of dir (installed at
// dest, packed at origin) works: root, "" when there is nothing to do
// (no origin recorded, the same place, no such subdir), with dest made
// absolute and origin cleaned.
func relocationRoot(dir, dest, origin, subdir string) (root, absDest, cleanOrigin string, err error) {
	if origin == "" {
		return "", "", "", nil
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", "", "", err
	}
	if dest, err = filepath.Abs(dest); err != nil {
		return "", "", "", err
	}
	origin = filepath.Clean(origin)
	if origin == dest {
		return "", "", "", nil
	}
	root = filepath.Join(dir, filepath.FromSlash(subdir))
	if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		return "", "", "", nil
	}
	return root, dest, origin, nil
}
